-- runtime_instance_delete: a worker leaving cleanly removes its row.
DELETE FROM awa.runtime_instances WHERE instance_id = %(instance_id)s::uuid

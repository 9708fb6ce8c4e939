-- dlq_get: one dead-lettered job by id (the job's id is kept when it moves).
SELECT * FROM awa.dlq WHERE id = %(id)s

-- lock_wait_bound: from here to the end of the transaction, no lock wait lasts longer than
-- %(lock_wait)s (it fails with lock_not_available instead). A limit writer sets it before
-- the locks a completion may hold while it waits for the writer's (awa.client.fleet):
-- rather than close a cycle only deadlock detection would break (after deadlock_timeout,
-- aborting either side), the writer gives way and tries again.
SELECT set_config('lock_timeout', %(lock_wait)s::text, true)

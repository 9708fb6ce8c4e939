-- job_discard_failed: delete failed jobs of one kind; returns how many went.
DELETE FROM awa.jobs WHERE state = 'failed' AND kind = %(kind)s

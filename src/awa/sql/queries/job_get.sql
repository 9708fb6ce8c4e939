-- job_get: one job by primary key.
SELECT * FROM awa.jobs WHERE id = %(id)s

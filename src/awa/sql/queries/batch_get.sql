-- batch_get: one batch operation with its progress.
SELECT * FROM awa.batch_operations WHERE id = %(id)s

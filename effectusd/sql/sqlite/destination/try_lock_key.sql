-- Always acquired. The driver opened this transaction with BEGIN IMMEDIATE, which holds the
-- database's only write lock until COMMIT, so no other transaction can have this key in
-- progress: a second request for it waits in BEGIN (up to the busy timeout) and then sees the
-- completed row, or answers 503 if the wait ran out. PostgreSQL's non-blocking advisory lock
-- has nothing to refuse here, and pretending otherwise would be a fake 409.
SELECT 1

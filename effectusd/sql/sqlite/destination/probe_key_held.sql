-- Always false. The probe runs in BEGIN IMMEDIATE, which waits for the database's only write
-- lock: once it has it, no request's transaction is open (see try_lock_key.sql).
SELECT 0

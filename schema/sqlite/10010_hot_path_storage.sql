-- The same version as PostgreSQL's 10010. SQLite has no fillfactor, and its unique key on
-- idempotency_key is part of the table (dropping it takes a table rebuild, not worth it for
-- one machine). The index on saga_id repeats the leading column of UNIQUE (saga_id,
-- effect_id, direction), which serves every lookup by saga as well, and costs every outbox
-- write an index entry.
DROP INDEX effectus_saga_outbox_saga;

-- No FOR UPDATE in SQLite, and none needed: this transaction holds the write lock, so nothing
-- can prune or change the row until it ends.
SELECT argument_hash, state, status_code, response_body, outcome, fencing_acknowledged
FROM effectus_dest_keys
WHERE idempotency_key = :key

-- A replay means the dispatcher still asks about this key: keep the answer at least as long again.
-- Times are REAL Unix seconds (see migrations/sqlite/0001_effectus_destination.sql).
UPDATE effectus_dest_keys
SET expires_at = max(expires_at, (julianday('now') - 2440587.5) * 86400.0 + :retention)
WHERE idempotency_key = :key

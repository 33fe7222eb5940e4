-- One bounded batch, so pruning a large ledger never holds the write lock for long. No SKIP
-- LOCKED: each batch runs under the database's write lock, so no replay is in flight meanwhile.
DELETE FROM effectus_dest_keys
WHERE idempotency_key IN (
    SELECT idempotency_key
    FROM effectus_dest_keys
    WHERE state = 'completed'
        AND expires_at <= coalesce(:before, (julianday('now') - 2440587.5) * 86400.0)
    ORDER BY expires_at
    LIMIT :batch
)

-- One bounded batch, so pruning a large ledger never holds one long transaction. SKIP LOCKED
-- leaves rows alone that a request is replaying right now (it is extending them anyway).
DELETE FROM effectus_dest_keys
WHERE idempotency_key IN (
    SELECT idempotency_key
    FROM effectus_dest_keys
    WHERE state = 'completed' AND expires_at <= coalesce(%(before)s::timestamptz, now())
    ORDER BY expires_at
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)

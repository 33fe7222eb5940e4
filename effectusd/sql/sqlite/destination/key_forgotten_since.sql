-- Whether an operator forgot the key at or after a moment (Unix seconds, as the table keeps
-- times): a forget re-issues an absent key, so the retry it was done for runs.
SELECT EXISTS (
    SELECT 1
    FROM effectus_dest_key_audit
    WHERE idempotency_key = :key AND action = 'forget' AND at >= :since
)

-- Whether an operator forgot the key at or after a moment (Unix seconds): a forget re-issues
-- an absent key, so the retry it was done for runs even when the key was issued long ago.
SELECT EXISTS (
    SELECT 1
    FROM effectus_dest_key_audit
    WHERE idempotency_key = %(key)s AND action = 'forget' AND at >= to_timestamp(%(since)s)
)

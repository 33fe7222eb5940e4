-- A replay means the dispatcher still asks about this key: keep the answer at least as long again.
UPDATE effectus_dest_keys
SET expires_at = greatest(expires_at, now() + %(retention)s)
WHERE idempotency_key = %(key)s

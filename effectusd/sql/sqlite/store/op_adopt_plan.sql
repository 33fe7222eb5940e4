-- adopt-contract: the saga's pinned plan, re-pinned to the loaded contracts (new digest).
-- Only while it is blocked on contract drift; the write lock is already held.
UPDATE effectus_saga_instances
SET plan = :plan,
    plan_digest = :plan_digest,
    revision = revision + 1,
    updated_at = ((julianday('now') - 2440587.5) * 86400.0)
WHERE saga_id = :saga_id AND state = 'blocked_contract'
RETURNING saga_id

-- adopt-contract: the saga's pinned plan, re-pinned to the loaded contracts (new digest).
-- Only while it is blocked on contract drift; the saga row is already locked.
UPDATE effectus_saga_instances
SET plan = %(plan)s::jsonb,
    plan_digest = %(plan_digest)s,
    revision = revision + 1,
    updated_at = now()
WHERE saga_id = %(saga_id)s AND state = 'blocked_contract'
RETURNING saga_id

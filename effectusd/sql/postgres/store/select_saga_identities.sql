-- submit_many: which of a batch's sagas exist already, and with what content; a tombstone
-- (pruned_at set) stands for a pruned saga whose identity may not be used again.
SELECT saga_id, plan_digest, facts_hash, state, finished_at, NULL::timestamptz AS pruned_at
FROM effectus_saga_instances
WHERE saga_id = ANY(%(saga_ids)s::text[])
UNION ALL
SELECT saga_id, plan_digest, facts_hash, state, finished_at, pruned_at
FROM effectus_saga_tombstones
WHERE saga_id = ANY(%(saga_ids)s::text[])

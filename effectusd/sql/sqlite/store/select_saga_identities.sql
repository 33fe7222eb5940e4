-- submit_many: which of a batch's sagas exist already, and with what content; a tombstone
-- (pruned_at set) stands for a pruned saga whose identity may not be used again.
SELECT saga_id, plan_digest, facts_hash, state, finished_at,
       NULL AS "pruned_at [timestamp_real]"
FROM effectus_saga_instances
WHERE saga_id IN (SELECT value FROM json_each(:saga_ids))
UNION ALL
SELECT saga_id, plan_digest, facts_hash, state, finished_at, pruned_at
FROM effectus_saga_tombstones
WHERE saga_id IN (SELECT value FROM json_each(:saga_ids))

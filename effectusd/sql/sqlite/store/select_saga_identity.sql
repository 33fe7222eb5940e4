-- Why a submit inserted nothing: the saga exists (pruned_at NULL), or only its tombstone does.
SELECT saga_id, plan_digest, facts_hash, state, finished_at,
       NULL AS "pruned_at [timestamp_real]"
FROM effectus_saga_instances WHERE saga_id = :saga_id
UNION ALL
SELECT saga_id, plan_digest, facts_hash, state, finished_at, pruned_at
FROM effectus_saga_tombstones WHERE saga_id = :saga_id

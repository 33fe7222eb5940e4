SELECT saga_id, plan_digest, facts_hash, state FROM effectus_saga_instances WHERE saga_id = :saga_id

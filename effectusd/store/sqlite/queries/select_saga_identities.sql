-- submit_many: which of a batch's sagas exist already, and with what content.
SELECT saga_id, plan_digest, facts_hash
FROM effectus_saga_instances
WHERE saga_id IN (SELECT value FROM json_each(:saga_ids))

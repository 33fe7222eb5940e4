-- insert_sagas for a whole batch (a JSON array of rows, one object per saga); no ON CONFLICT,
-- as there.
INSERT INTO effectus_saga_instances
    (saga_id, namespace, execution_id, plan_id, plan_digest, plan, facts, facts_hash,
     trace_context)
SELECT saga_id, namespace, execution_id, plan_id, plan_digest, plan::jsonb, facts::jsonb,
       facts_hash, trace_context
FROM json_to_recordset(%(rows)s::json) AS s(
        saga_id text, namespace text, execution_id text, plan_id text,
        plan_digest text, plan text, facts text, facts_hash text, trace_context text
     )

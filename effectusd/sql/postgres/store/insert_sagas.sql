-- submit_many: the batch's new sagas (run once per row). No ON CONFLICT: the batch read first,
-- so a conflict here is a concurrent submit, and failing the whole batch is the safe answer.
INSERT INTO effectus_saga_instances
    (saga_id, namespace, execution_id, plan_id, plan_digest, plan, facts, facts_hash,
     trace_context)
VALUES
    (%(saga_id)s, %(namespace)s, %(execution_id)s, %(plan_id)s, %(plan_digest)s,
     %(plan)s::jsonb, %(facts)s::jsonb, %(facts_hash)s, %(trace_context)s)

-- insert_sagas for a whole batch (arrays, one element per saga); no ON CONFLICT, as there.
INSERT INTO effectus_saga_instances
    (saga_id, namespace, execution_id, plan_id, plan_digest, plan, facts, facts_hash)
SELECT saga_id, namespace, execution_id, plan_id, plan_digest, plan::jsonb, facts::jsonb,
       facts_hash
FROM unnest(%(saga_id)s::text[], %(namespace)s::text[], %(execution_id)s::text[],
            %(plan_id)s::text[], %(plan_digest)s::text[], %(plan)s::text[], %(facts)s::text[],
            %(facts_hash)s::text[])
     AS s(saga_id, namespace, execution_id, plan_id, plan_digest, plan, facts, facts_hash)

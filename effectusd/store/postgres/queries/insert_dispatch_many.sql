-- insert_dispatch for a whole batch (arrays, one element per dispatch; fencing_resources are
-- JSON texts).
INSERT INTO effectus_saga_outbox
    (saga_id, effect_id, direction, namespace, execution_id, destination, verb, contract_hash,
     delivery, method, path, args_canonical, args_hash, idempotency_key, fencing_resources,
     timeout_ms, max_attempts, next_attempt_at, created_at)
SELECT saga_id, effect_id, direction, namespace, execution_id, destination, verb,
       contract_hash, delivery, method, path, args_canonical, args_hash, idempotency_key,
       fencing_resources::jsonb, timeout_ms, max_attempts, coalesce(not_before, now()),
       clock_timestamp()
FROM unnest(%(saga_id)s::text[], %(effect_id)s::text[], %(direction)s::text[],
            %(namespace)s::text[], %(execution_id)s::text[], %(destination)s::text[],
            %(verb)s::text[], %(contract_hash)s::text[], %(delivery)s::text[],
            %(method)s::text[], %(path)s::text[], %(args_canonical)s::text[],
            %(args_hash)s::text[], %(idempotency_key)s::text[], %(fencing_resources)s::text[],
            %(timeout_ms)s::int[], %(max_attempts)s::int[], %(not_before)s::timestamptz[])
     AS d(saga_id, effect_id, direction, namespace, execution_id, destination, verb,
          contract_hash, delivery, method, path, args_canonical, args_hash, idempotency_key,
          fencing_resources, timeout_ms, max_attempts, not_before)

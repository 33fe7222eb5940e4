-- `effectusd bench --backlog`: rows first through last of a backlog of ready dispatches, one
-- running saga with one started step each, shaped like a burst of submissions (which write
-- no step rows, migration 10018). Ids are sha256 hex like real ones (random B-tree keys);
-- next_attempt_at is spread over the past.
-- The foreign keys are checked at the end of the statement, so one statement fills both.
WITH series AS (
    SELECT g,
           encode(sha256(convert_to('bench-backlog-saga-' || g, 'UTF8')), 'hex') AS saga_id,
           encode(sha256(convert_to('bench-backlog-key-' || g, 'UTF8')), 'hex') AS key,
           repeat('0', 64) AS zero_hash
    FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g
),
sagas AS (
    INSERT INTO effectus_saga_instances
        (saga_id, namespace, execution_id, plan_id, plan_digest, plan, facts, facts_hash)
    SELECT saga_id, %(namespace)s, 'backlog-' || g, 'bench-backlog', zero_hash, '{}', '{}',
           zero_hash
    FROM series
)
INSERT INTO effectus_saga_outbox
    (saga_id, effect_id, direction, namespace, execution_id, destination, verb, contract_hash,
     delivery, method, path, args_canonical, args_hash, idempotency_key, timeout_ms,
     max_attempts, next_attempt_at)
SELECT saga_id, 's0', 'forward', %(namespace)s, 'backlog-' || g, %(destination)s, %(verb)s,
       zero_hash, 'at_least_once', 'POST', %(path)s, '{"i":0}', zero_hash, key, 10000, 5,
       now() - make_interval(secs => (%(total)s - g) / 1000.0)
FROM series

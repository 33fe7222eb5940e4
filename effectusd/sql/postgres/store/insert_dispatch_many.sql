-- insert_dispatch for a whole batch (a JSON array of rows, one object per dispatch;
-- fencing_resources are JSON texts). WITH ORDINALITY and the ORDER BY give the rows their
-- dispatch_id in the order they were produced: a saga's first dispatches are shown in that
-- order on its timeline (effectusd/core/timeline.py). Each destination that gets a row is woken
-- once, in this statement (as insert_dispatch.sql).
WITH inserted AS (
INSERT INTO effectus_saga_outbox
    (saga_id, effect_id, direction, namespace, execution_id, destination, verb, contract_hash,
     delivery, method, path, args_canonical, args_hash, idempotency_key, fencing_resources,
     timeout_ms, max_attempts, next_attempt_at, created_at, enqueued_by, started_from,
     enqueued_after)
SELECT saga_id, effect_id, direction, namespace, execution_id, destination, verb,
       contract_hash, delivery, method, path, args_canonical, args_hash, idempotency_key,
       fencing_resources::jsonb, timeout_ms, max_attempts, coalesce(not_before, now()),
       clock_timestamp(), enqueued_by, started_from, enqueued_after
FROM ROWS FROM (json_to_recordset(%(rows)s::json) AS (
        saga_id text, effect_id text, direction text, namespace text,
        execution_id text, destination text, verb text, contract_hash text,
        delivery text, method text, path text, args_canonical text, args_hash text,
        idempotency_key text, fencing_resources text, timeout_ms int,
        max_attempts int, not_before timestamptz, enqueued_by text, started_from text,
        enqueued_after bigint
     )) WITH ORDINALITY
     AS d(saga_id, effect_id, direction, namespace, execution_id, destination, verb,
          contract_hash, delivery, method, path, args_canonical, args_hash, idempotency_key,
          fencing_resources, timeout_ms, max_attempts, not_before, enqueued_by, started_from,
          enqueued_after, n)
ORDER BY n
RETURNING destination
)
SELECT pg_notify('effectus_outbox', destination) FROM (SELECT DISTINCT destination FROM inserted) d

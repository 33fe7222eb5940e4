-- created_at is when the row is written (clock_timestamp), not when its transaction began:
-- enqueue->dispatch latency should not count the work the submitter did before enqueueing.
-- enqueued_by: who enqueued it, when the row carries its timeline entry (dispatch_enqueued,
-- effectusd/core/timeline.py), else NULL (the event is stored); started_from and
-- enqueued_after: the start of its step, when the row carries that entry too (the state the
-- step started from, the settlement entry it follows). The new row wakes the daemons
-- listening for its destination (delivered at commit, so never for work rolled back), in this
-- statement: no round trip of its own.
WITH inserted AS (
INSERT INTO effectus_saga_outbox
    (saga_id, effect_id, direction, namespace, execution_id, destination, verb, contract_hash,
     delivery, method, path, args_canonical, args_hash, idempotency_key, fencing_resources,
     timeout_ms, max_attempts, next_attempt_at, created_at, enqueued_by, started_from,
     enqueued_after)
VALUES
    (%(saga_id)s, %(effect_id)s, %(direction)s, %(namespace)s, %(execution_id)s, %(destination)s,
     %(verb)s, %(contract_hash)s, %(delivery)s, %(method)s, %(path)s, %(args_canonical)s,
     %(args_hash)s, %(idempotency_key)s, %(fencing_resources)s::jsonb, %(timeout_ms)s,
     %(max_attempts)s, coalesce(%(not_before)s::timestamptz, now()), clock_timestamp(),
     %(enqueued_by)s, %(started_from)s, %(enqueued_after)s)
RETURNING dispatch_id, destination
)
SELECT dispatch_id, pg_notify('effectus_outbox', destination) FROM inserted

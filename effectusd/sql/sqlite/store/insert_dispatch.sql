-- No RETURNING (PostgreSQL returns dispatch_id, which no caller reads): the recorder inserts
-- with executemany, and a SQLite statement run that way must not return rows. enqueued_by: who
-- enqueued it, when the row carries its timeline entry (dispatch_enqueued,
-- effectusd/core/timeline.py), else NULL (the event is stored); started_from and
-- enqueued_after: the start of its step, when the row carries that entry too.
INSERT INTO effectus_saga_outbox
    (saga_id, effect_id, direction, namespace, execution_id, destination, verb, contract_hash,
     delivery, method, path, args_canonical, args_hash, idempotency_key, fencing_resources,
     timeout_ms, max_attempts, next_attempt_at, enqueued_by, started_from, enqueued_after)
VALUES
    (:saga_id, :effect_id, :direction, :namespace, :execution_id, :destination,
     :verb, :contract_hash, :delivery, :method, :path, :args_canonical,
     :args_hash, :idempotency_key, :fencing_resources, :timeout_ms,
     :max_attempts, coalesce(:not_before, ((julianday('now') - 2440587.5) * 86400.0)),
     :enqueued_by, :started_from, :enqueued_after)

-- A dispatch's grants are those of its latest sent attempt (the write-ahead stores them on the
-- attempt row; on PostgreSQL it rewrites the outbox row only when that row changes, so an
-- unfenced dispatch's own grants column stays NULL). None while no attempt was sent.
SELECT o.dispatch_id, o.effect_id, o.direction, o.destination, o.verb, o.contract_hash,
       o.delivery, o.method, o.path, o.args_hash, o.args_canonical, o.idempotency_key,
       o.fencing_resources,
       o.state, o.attempt, o.max_attempts, o.lease_owner, o.lease_expires_at, o.next_attempt_at,
       (SELECT a.grants FROM effectus_saga_attempts a
        WHERE a.dispatch_id = o.dispatch_id AND a.sent_at IS NOT NULL
        ORDER BY a.attempt DESC LIMIT 1) AS grants,
       o.uncertain_attempt, o.last_outcome, o.last_error, o.created_at, o.updated_at,
       -- requests that may have been written: claims that ended before their write aside
       o.attempt - o.unsent AS requests, o.fence_waits, o.fence_wait_since,
       o.budget_since AS budget_started_at, o.gives_up_at
FROM effectus_saga_outbox o WHERE o.saga_id = %(saga_id)s ORDER BY o.dispatch_id

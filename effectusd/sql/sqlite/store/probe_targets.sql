-- What a probe of each taken dispatch needs, and what its settlement is guarded on (see
-- PostgreSQL's).
SELECT o.dispatch_id, o.saga_id, o.effect_id, o.direction, o.execution_id, o.destination,
       o.verb, o.contract_hash, o.args_canonical, o.args_hash, o.idempotency_key, o.state,
       o.attempt, o.lease_token, o.uncertain_attempt, o.created_at,
       a.lease_expires_at AS "deadline [timestamp_real]", s.facts,
       o.attempt - o.unsent AS requests
FROM effectus_saga_outbox o
JOIN effectus_saga_instances s ON s.saga_id = o.saga_id
JOIN effectus_saga_attempts a ON a.dispatch_id = o.dispatch_id AND a.attempt = o.attempt
WHERE o.dispatch_id IN (SELECT value FROM json_each(:dispatch_ids))
ORDER BY o.dispatch_id

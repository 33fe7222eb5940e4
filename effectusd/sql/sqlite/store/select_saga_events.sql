-- The saga's timeline in one snapshot: the stored events, then the entries read from the rows
-- that carry them instead (event_id NULL): each attempt's claim, each settlement written with
-- its entry (settled_to set), each dispatch enqueued with its entry (enqueued_by set), with the
-- step moves those rows carry (settled_step; started_from and enqueued_after) and the
-- saga's completion (settled_saga). Their
-- detail is built as the stored event's was (json_object, keys in the order the writer gave
-- them); the column types are the first SELECT's. effectusd.core.timeline.timeline places
-- them and fills them in.
SELECT event_id, effect_id, direction, attempt, kind, from_state, to_state, actor, evidence,
       detail, at, NULL AS dispatch_id, NULL AS "lease_expires_at [timestamp_real]",
       NULL AS settled_after, NULL AS settled_step, NULL AS started_from,
       NULL AS enqueued_after, NULL AS settled_saga
FROM effectus_saga_events WHERE saga_id = :saga_id
UNION ALL
SELECT NULL, o.effect_id, o.direction, a.attempt, 'dispatch_claimed', NULL, 'in_flight',
       a.lease_owner, NULL, NULL, a.claimed_at, a.dispatch_id, a.lease_expires_at, NULL,
       NULL, NULL, NULL, NULL
FROM effectus_saga_attempts a
JOIN effectus_saga_outbox o ON o.dispatch_id = a.dispatch_id
WHERE o.saga_id = :saga_id
UNION ALL
SELECT NULL, o.effect_id, o.direction, a.attempt, 'attempt_settled', 'in_flight', a.settled_to,
       a.settled_actor, NULL,
       json_object('outcome', a.outcome, 'settled_by', a.settled_by,
                   'status_code', a.status_code, 'error', a.error),
       a.completed_at, a.dispatch_id, NULL, a.settled_after, a.settled_step, NULL, NULL,
       a.settled_saga
FROM effectus_saga_attempts a
JOIN effectus_saga_outbox o ON o.dispatch_id = a.dispatch_id
WHERE o.saga_id = :saga_id AND a.settled_to IS NOT NULL
UNION ALL
SELECT NULL, o.effect_id, o.direction, NULL, 'dispatch_enqueued', NULL, 'queued',
       o.enqueued_by, NULL,
       json_object('idempotency_key', o.idempotency_key, 'args_hash', o.args_hash),
       o.created_at, o.dispatch_id, NULL, NULL, NULL, o.started_from, o.enqueued_after, NULL
FROM effectus_saga_outbox o
WHERE o.saga_id = :saga_id AND o.enqueued_by IS NOT NULL
ORDER BY event_id  -- the rows' entries (NULL) come first or last by store: timeline places them

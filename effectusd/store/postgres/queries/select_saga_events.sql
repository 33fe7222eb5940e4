-- The saga's timeline in one snapshot: the stored events, in event_id order, then one row per
-- attempt (event_id NULL), the claim that opened it. A claim appends no event: its entry is
-- its attempt row; effectusd.core.timeline.with_claims places it and fills it in.
SELECT event_id, effect_id, direction, attempt, kind, from_state, to_state, actor, evidence,
       detail, at, NULL::bigint AS dispatch_id, NULL::timestamptz AS lease_expires_at
FROM effectus_saga_events WHERE saga_id = %(saga_id)s
UNION ALL
SELECT NULL, o.effect_id, o.direction, a.attempt, 'dispatch_claimed', NULL, 'in_flight',
       a.lease_owner, NULL, NULL, a.claimed_at, a.dispatch_id, a.lease_expires_at
FROM effectus_saga_attempts a
JOIN effectus_saga_outbox o ON o.dispatch_id = a.dispatch_id
WHERE o.saga_id = %(saga_id)s
ORDER BY event_id  -- the claims (NULL) come first or last by store: with_claims places them

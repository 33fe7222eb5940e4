-- Each dispatch's state and current lease token: a fencing lease held under any other token,
-- or by a dispatch not in flight, is a claim that has ended.
SELECT dispatch_id, state, lease_token
FROM effectus_saga_outbox
WHERE dispatch_id = ANY(%(dispatch_ids)s::bigint[])

-- No FOR UPDATE: the recorder's transaction holds SQLite's write lock from its start, which
-- also keeps a claim from taking a sibling not yet sent (PostgreSQL locks those: saga_ids).
SELECT o.dispatch_id, o.saga_id, o.effect_id, o.direction, o.delivery, o.verb, o.destination,
       o.state, o.attempt, o.max_attempts, o.budget_base, o.uncertain_attempt, o.fence_waits,
       o.unsent, ((julianday('now') - 2440587.5) * 86400.0) - o.budget_since AS budget_elapsed_s,
       o.lease_token, o.fencing_resources <> '[]' AS "fenced [boolean]",
       o.lease_expires_at < ((julianday('now') - 2440587.5) * 86400.0)
           AS "lease_expired [boolean]"
FROM effectus_saga_outbox o
WHERE o.dispatch_id IN (SELECT value FROM json_each(:dispatch_ids))
ORDER BY o.dispatch_id

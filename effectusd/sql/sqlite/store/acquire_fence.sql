-- Take the fencing lease on one resource and the next token, or no row when another live
-- holder has it (PostgreSQL: effectus_acquire_fence). One statement, under the write lock every
-- SQLite write transaction takes up front (BEGIN IMMEDIATE), so no other acquirer runs between
-- reading the counter and taking the lease. The token is PostgreSQL's effectus_fence_next on
-- timeline 1: max(counter, base + ticks) + 1, ticks the clock's floor (the view
-- effectus_fence_floor, migration 10023: above what an earlier store or an older copy of this
-- file granted), base the 2^36 multiple of a counter carried from a server on a higher timeline
-- (its distance from the clock, rounded; 0 for this file's own). The triggers on
-- effectus_fencing_leases move the counter to the token, refuse a token handed out before, and
-- the counter's own trigger refuses to lower it. The same holder may take its lease again (a
-- new token); an expired lease is taken over.
WITH counter (last, ticks) AS (
    SELECT coalesce((SELECT last_token FROM effectus_fencing_counters
                     WHERE resource = :resource), 0),
           token_floor
    FROM effectus_fence_floor
)
INSERT INTO effectus_fencing_leases
    (resource, holder_dispatch_id, holder_lease_token, token, acquired_at, expires_at)
SELECT :resource, :dispatch_id, :lease_token,
       max(last, max(0, (last - ticks + 34359738368) / 68719476736) * 68719476736 + ticks) + 1,
       ((julianday('now') - 2440587.5) * 86400.0), :expires_at
FROM counter
WHERE true  -- an INSERT … SELECT takes an ON CONFLICT clause only after a WHERE
ON CONFLICT (resource) DO UPDATE
SET holder_dispatch_id = excluded.holder_dispatch_id,
    holder_lease_token = excluded.holder_lease_token,
    token = excluded.token,
    acquired_at = excluded.acquired_at,
    expires_at = excluded.expires_at
WHERE effectus_fencing_leases.expires_at <= ((julianday('now') - 2440587.5) * 86400.0)
   OR (effectus_fencing_leases.holder_dispatch_id = excluded.holder_dispatch_id
       AND effectus_fencing_leases.holder_lease_token = excluded.holder_lease_token)
RETURNING token

-- Take the fencing lease on one resource and the next token, or no row when another live
-- holder has it (PostgreSQL: effectus_acquire_fence). One statement, under the write lock every
-- SQLite write transaction takes up front (BEGIN IMMEDIATE), so no other acquirer runs between
-- reading the counter and taking the lease. The token is max(counter, the clock's floor) + 1
-- (the view effectus_fence_floor, migration 10023: above what an earlier store or an older
-- copy of this file granted); the triggers on effectus_fencing_leases move the counter to it,
-- refuse a token handed out before, and the counter's own trigger refuses to lower it. The
-- same holder may take its lease again (a new token); an expired lease is taken over.
INSERT INTO effectus_fencing_leases
    (resource, holder_dispatch_id, holder_lease_token, token, acquired_at, expires_at)
VALUES
    (:resource, :dispatch_id, :lease_token,
     max(coalesce((SELECT last_token FROM effectus_fencing_counters WHERE resource = :resource),
                  0),
         (SELECT token_floor FROM effectus_fence_floor))
         + 1,
     ((julianday('now') - 2440587.5) * 86400.0), :expires_at)
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

-- The fencing authority of several stores granted this token to a dispatch of this store: the
-- store's counter keeps the highest such token, in the write-ahead that records the grant, so
-- that `effectusd migrate` carries it back into an authority restored from an older backup
-- (PostgreSQL: keep_fence_token.sql).
INSERT INTO effectus_fencing_counters (resource, last_token)
VALUES (:resource, :token)
ON CONFLICT (resource) DO UPDATE
SET last_token = excluded.last_token, updated_at = ((julianday('now') - 2440587.5) * 86400.0)
WHERE effectus_fencing_counters.last_token < excluded.last_token

-- The fencing authority of several stores granted this token to a dispatch of this store: the
-- store's counter keeps the highest such token, in the write-ahead that records the grant, so
-- that `effectusd migrate` carries it back into an authority restored from an older backup
-- (docs/design.md section 8, "One authority for several stores").
INSERT INTO effectus_fencing_counters (resource, last_token)
VALUES (%(resource)s, %(token)s)
ON CONFLICT (resource) DO UPDATE
SET last_token = excluded.last_token, updated_at = now()
WHERE effectus_fencing_counters.last_token < excluded.last_token

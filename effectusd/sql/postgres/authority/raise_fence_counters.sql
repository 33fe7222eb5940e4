-- A store's counters carried into the authority: each resource's counter is raised to the
-- store's last token if that is higher (never lowered), so the authority grants above every
-- token the store issued.
INSERT INTO effectus_fencing_counters (resource, last_token)
SELECT r.resource, r.last_token
FROM unnest(%(resources)s::text[], %(tokens)s::bigint[]) AS r(resource, last_token)
ON CONFLICT (resource) DO UPDATE
SET last_token = greatest(effectus_fencing_counters.last_token, excluded.last_token),
    updated_at = now()
WHERE excluded.last_token > effectus_fencing_counters.last_token

-- What one probe's answer left: when to ask again (NULL: never), the status it got, and when
-- the probes were given up. Only the latest probe taken (:probes) moves the row: an earlier
-- probe's late answer changes nothing; and the probes are given up once. The row it moved, if
-- any.
UPDATE effectus_dispatch_probes
SET next_probe_at = %(next_probe_at)s,
    last_status = coalesce(%(last_status)s, last_status),
    given_up_at = CASE WHEN %(given_up)s THEN now() ELSE given_up_at END,
    updated_at = now()
WHERE dispatch_id = %(dispatch_id)s AND attempt = %(attempt)s AND probes = %(probes)s
  AND (NOT %(given_up)s OR given_up_at IS NULL)
RETURNING dispatch_id

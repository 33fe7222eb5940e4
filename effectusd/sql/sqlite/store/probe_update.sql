-- What one probe's answer left (see PostgreSQL's): only the latest probe taken moves the row,
-- and the probes are given up once.
UPDATE effectus_dispatch_probes
SET next_probe_at = :next_probe_at,
    last_status = coalesce(:last_status, last_status),
    given_up_at = CASE WHEN :given_up THEN ((julianday('now') - 2440587.5) * 86400.0)
                       ELSE given_up_at END,
    updated_at = ((julianday('now') - 2440587.5) * 86400.0)
WHERE dispatch_id = :dispatch_id AND attempt = :attempt AND probes = :probes
  AND (NOT :given_up OR given_up_at IS NULL)
RETURNING dispatch_id

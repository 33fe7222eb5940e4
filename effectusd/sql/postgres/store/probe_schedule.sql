-- The first probe of a blocked attempt (its deadline plus the verb's `after`); a second
-- scheduler of the same attempt changes nothing.
INSERT INTO effectus_dispatch_probes (dispatch_id, attempt, next_probe_at)
VALUES (%(dispatch_id)s, %(attempt)s, %(next_probe_at)s)
ON CONFLICT (dispatch_id, attempt) DO NOTHING
RETURNING dispatch_id, attempt

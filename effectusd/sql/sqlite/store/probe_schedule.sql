-- The first probe of a blocked attempt (its deadline plus the verb's `after`).
INSERT INTO effectus_dispatch_probes (dispatch_id, attempt, next_probe_at)
VALUES (:dispatch_id, :attempt, :next_probe_at)
ON CONFLICT (dispatch_id, attempt) DO NOTHING
RETURNING dispatch_id, attempt

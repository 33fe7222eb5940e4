-- Sagas finished in the last window, by end state: the overview's outcome rates. The partial
-- index on finished_at keeps this to the window's rows however many are stored.
SELECT state, count(*) AS n
FROM effectus_saga_instances
WHERE finished_at IS NOT NULL
  AND finished_at >= now() - make_interval(secs => %(window_s)s::float8)
GROUP BY state

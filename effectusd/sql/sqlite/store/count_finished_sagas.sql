-- Sagas finished in the last window, by end state: the overview's outcome rates. The partial
-- index on finished_at keeps this to the window's rows however many are stored.
SELECT state, count(*) AS n
FROM effectus_saga_instances
WHERE finished_at IS NOT NULL
  AND finished_at >= ((julianday('now') - 2440587.5) * 86400.0) - :window_s
GROUP BY state

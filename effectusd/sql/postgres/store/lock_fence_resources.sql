-- One global lock order for a write-ahead's fencing: before taking any resource, lock every
-- resource of the whole batch, by lock key, so that two batches over overlapping resources wait
-- for each other instead of deadlocking (each effectus_acquire_fence then only re-locks what
-- its transaction already holds). Transaction-scoped advisory locks in effectusd's own key space
-- (the two-key form; 1164340803 = 'EFNC'); a hash collision only serialises a little more.
SELECT pg_advisory_xact_lock(1164340803, k.key) AS locked
FROM (
    SELECT DISTINCT hashtext(r) AS key
    FROM unnest(%(resources)s::text[]) AS r
    ORDER BY key
) AS k

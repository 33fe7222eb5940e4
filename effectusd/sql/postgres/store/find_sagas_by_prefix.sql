-- `sagas show PREFIX`: the sagas whose id starts with the prefix `sagas list` prints (an
-- operator's lookup: a scan is acceptable). Two or more rows: the prefix is ambiguous.
SELECT saga_id, execution_id, plan_id, state
FROM effectus_saga_instances
WHERE left(saga_id, length(%(prefix)s)) = %(prefix)s
ORDER BY saga_id
LIMIT %(limit)s

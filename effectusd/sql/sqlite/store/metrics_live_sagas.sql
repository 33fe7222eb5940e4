-- Only live and blocked sagas: they are what operators alert on, and they sit in the
-- partial index, so this stays cheap however many finished sagas there are.
SELECT state, count(*) AS n
FROM effectus_saga_instances
WHERE state NOT IN ('completed', 'compensated', 'failed')
GROUP BY state

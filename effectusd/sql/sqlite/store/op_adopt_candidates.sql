-- adopt-contract --verb: the sagas that may be blocked on that verb (each is then locked and
-- looked at on its own).
SELECT saga_id
FROM effectus_saga_instances
WHERE state = 'blocked_contract'
ORDER BY saga_id

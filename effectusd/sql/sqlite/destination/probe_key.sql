-- What the ledger holds under a key, for a probe (the write lock keeps it still meanwhile).
SELECT state, status_code, response_body, outcome, fencing_acknowledged
FROM effectus_dest_keys
WHERE idempotency_key = :key

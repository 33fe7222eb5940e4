-- FOR UPDATE: the row cannot be pruned while it is being replayed.
SELECT argument_hash, state, status_code, response_body, outcome, fencing_acknowledged
FROM effectus_dest_keys
WHERE idempotency_key = %(key)s
FOR UPDATE

-- What the ledger holds under a key, for a probe: read only, never locked (a probe must not
-- delay or refuse a request), and run after probe_key_held so that it sees any answer
-- committed before that check.
SELECT state, status_code, response_body, outcome, fencing_acknowledged
FROM effectus_dest_keys
WHERE idempotency_key = %(key)s

-- adopt-contract: the dispatch the pre-dispatch guard stopped, rebuilt under the adopted
-- contract (same row, arguments and idempotency key; what the contract decides is new).
UPDATE effectus_saga_outbox
SET contract_hash = %(contract_hash)s,
    destination = %(destination)s,
    delivery = %(delivery)s,
    method = %(method)s,
    path = %(path)s,
    fencing_resources = %(fencing_resources)s::jsonb,
    timeout_ms = %(timeout_ms)s,
    updated_at = now()
WHERE dispatch_id = %(dispatch_id)s AND state = 'blocked_contract'
RETURNING dispatch_id

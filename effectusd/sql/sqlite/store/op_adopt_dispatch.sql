-- adopt-contract: the dispatch the pre-dispatch guard stopped, rebuilt under the adopted
-- contract (same row, arguments and idempotency key; what the contract decides is new).
UPDATE effectus_saga_outbox
SET contract_hash = :contract_hash,
    destination = :destination,
    delivery = :delivery,
    method = :method,
    path = :path,
    fencing_resources = :fencing_resources,
    timeout_ms = :timeout_ms,
    updated_at = ((julianday('now') - 2440587.5) * 86400.0)
WHERE dispatch_id = :dispatch_id AND state = 'blocked_contract'
RETURNING dispatch_id

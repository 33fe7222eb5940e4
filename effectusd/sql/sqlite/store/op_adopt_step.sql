-- adopt-contract: one step's pins (its verb's hash and fencing templates, its compensation).
UPDATE effectus_saga_steps
SET contract_hash = :contract_hash,
    compensation = :compensation,
    fencing = :fencing,
    updated_at = ((julianday('now') - 2440587.5) * 86400.0)
WHERE saga_id = :saga_id AND effect_id = :effect_id

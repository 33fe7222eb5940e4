-- adopt-contract: one step's pins (its verb's hash and fencing templates, its compensation).
UPDATE effectus_saga_steps
SET contract_hash = %(contract_hash)s,
    compensation = %(compensation)s::jsonb,
    fencing = %(fencing)s::jsonb,
    updated_at = now()
WHERE saga_id = %(saga_id)s AND effect_id = %(effect_id)s

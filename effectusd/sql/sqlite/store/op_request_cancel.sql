UPDATE effectus_saga_instances
SET cancel_requested_at = ((julianday('now') - 2440587.5) * 86400.0),
    cancel_requested_by = :actor,
    revision = revision + 1,
    updated_at = ((julianday('now') - 2440587.5) * 86400.0)
WHERE saga_id = :saga_id AND cancel_requested_at IS NULL
RETURNING cancel_requested_at

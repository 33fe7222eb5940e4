UPDATE effectus_saga_instances
SET cancel_requested_at = now(), cancel_requested_by = %(actor)s,
    revision = revision + 1, updated_at = now()
WHERE saga_id = %(saga_id)s AND cancel_requested_at IS NULL
RETURNING cancel_requested_at

-- The attempt row of a claim (run with executemany, one row per claimed dispatch).
INSERT INTO effectus_saga_attempts
    (dispatch_id, attempt, request_id, lease_owner, lease_token, lease_expires_at)
VALUES
    (:dispatch_id, :attempt, :request_id, :owner, :lease_token, :lease_expires_at)

-- Accept a token at or above the resource's watermark and raise the watermark to it.
-- No row back means the token is below the watermark: stale. Concurrent holders of one
-- resource are serialised by the transaction's write lock (BEGIN IMMEDIATE).
INSERT INTO effectus_dest_watermarks AS mark (resource, token)
VALUES (:resource, :token)
ON CONFLICT (resource) DO UPDATE
    SET token = excluded.token, updated_at = (julianday('now') - 2440587.5) * 86400.0
    WHERE mark.token <= excluded.token
RETURNING token

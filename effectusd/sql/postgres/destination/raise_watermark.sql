-- Accept a token at or above the resource's watermark and raise the watermark to it.
-- No row back means the token is below the watermark: stale. The conflicting row stays
-- locked until the transaction ends, so concurrent holders of one resource are serialised.
INSERT INTO effectus_dest_watermarks AS mark (resource, token)
VALUES (%(resource)s, %(token)s)
ON CONFLICT (resource) DO UPDATE
    SET token = excluded.token, updated_at = now()
    WHERE mark.token <= excluded.token
RETURNING mark.token

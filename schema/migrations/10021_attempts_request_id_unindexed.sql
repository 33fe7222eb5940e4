-- No unique index on an attempt's request ID. It is drawn by the server's gen_random_uuid()
-- (122 random bits from its strong random source) in the statement that opens the attempt,
-- and no statement looks an attempt up by it: the index only cost every attempt row version
-- an entry and a uniqueness probe (about 72 WAL bytes per step on the bench). The request ID
-- stays what the wire protocol says, unique per attempt (docs/design.md section 5), by how
-- it is drawn; the column stays a NOT NULL uuid.
ALTER TABLE effectus_saga_attempts DROP CONSTRAINT effectus_saga_attempts_request_id_key;

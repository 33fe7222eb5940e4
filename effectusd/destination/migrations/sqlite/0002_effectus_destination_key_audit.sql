-- The same table as ../0002_effectus_destination_key_audit.sql: what an operator did to a
-- stored answer, and why. Never pruned. Times are REAL Unix seconds, booleans INTEGER 0 or 1.
CREATE TABLE effectus_dest_key_audit (
    audit_id              INTEGER PRIMARY KEY,
    idempotency_key       TEXT NOT NULL,
    action                TEXT NOT NULL CHECK (action IN ('forget')),
    actor                 TEXT NOT NULL,
    evidence              TEXT NOT NULL,
    forced                INTEGER NOT NULL CHECK (forced IN (0, 1)),
    -- The record as it was when forgotten.
    argument_hash         TEXT NOT NULL,
    status_code           INTEGER NOT NULL,
    response_body         BLOB NOT NULL,
    outcome               TEXT,
    saga_id               TEXT NOT NULL,
    effect_id             TEXT NOT NULL,
    direction             TEXT NOT NULL,
    verb                  TEXT NOT NULL,
    attempt               INTEGER NOT NULL,
    key_created_at        REAL NOT NULL,
    key_completed_at      REAL,
    at                    REAL NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0)
) STRICT;

CREATE INDEX effectus_dest_key_audit_key ON effectus_dest_key_audit (idempotency_key, audit_id);

-- The destination kit's tables for SQLite, the same tables as ../0001_effectus_destination.sql.
-- They live in the application's own database file, next to its business tables, so that the
-- ledger row and the business mutation commit together.
--
-- STRICT (SQLite 3.37+) makes the declared types binding, as they are in PostgreSQL.
-- Timestamps are REAL Unix seconds, computed as (julianday('now') - 2440587.5) * 86400.0,
-- a sub-second clock older than unixepoch('subsec') (3.42). Booleans are INTEGER 0 or 1.

-- One row per idempotency key: the dedupe record and the stored terminal answer.
-- The kit writes 'in_progress' and 'completed' in the same transaction, so other connections
-- only ever see 'completed' rows; 'in_progress' marks the row while its mutation runs.
CREATE TABLE effectus_dest_keys (
    idempotency_key       TEXT PRIMARY KEY NOT NULL,
    argument_hash         TEXT NOT NULL,
    state                 TEXT NOT NULL CHECK (state IN ('in_progress', 'completed')),
    status_code           INTEGER CHECK (status_code BETWEEN 200 AND 599),
    response_body         BLOB,
    outcome               TEXT,       -- X-Effectus-Outcome of the stored answer; NULL on 2xx
    fencing_acknowledged  INTEGER NOT NULL DEFAULT 0 CHECK (fencing_acknowledged IN (0, 1)),
    -- Who asked first: evidence for an operator settling a blocked_unknown dispatch.
    saga_id               TEXT NOT NULL,
    effect_id             TEXT NOT NULL,
    direction             TEXT NOT NULL,
    verb                  TEXT NOT NULL,
    request_id            TEXT NOT NULL,
    attempt               INTEGER NOT NULL,
    created_at            REAL NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
    completed_at          REAL,
    expires_at            REAL NOT NULL,  -- only makes the row prunable; never ignored
    CHECK ((state = 'completed') = (status_code IS NOT NULL AND response_body IS NOT NULL))
) STRICT;

CREATE INDEX effectus_dest_keys_expires_at ON effectus_dest_keys (expires_at);

-- The highest fencing token accepted per resource. Never lowered.
CREATE TABLE effectus_dest_watermarks (
    resource    TEXT PRIMARY KEY NOT NULL,
    token       INTEGER NOT NULL CHECK (token >= 0),
    updated_at  REAL NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0)
) STRICT;

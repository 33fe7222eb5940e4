-- The same version as PostgreSQL's 10018. A submit writes no step rows: a step is read from
-- its saga's pinned plan, its state from its dispatches (docs/design.md section 10), so a
-- dispatch's row belongs to its saga, not to a step row. SQLite changes a foreign key only by
-- rebuilding the table (the migration runner turns foreign key enforcement off around each
-- migration and checks every key before it commits): the outbox is copied into a new table
-- with the saga's foreign key, its indexes and triggers made again. Its id sequence is kept
-- (AUTOINCREMENT: a pruned dispatch's id is never handed out again). The attempts' and
-- probes' foreign keys name the outbox table by name and find the new one.
CREATE TABLE effectus_saga_outbox_rebuilt (
    dispatch_id        INTEGER PRIMARY KEY AUTOINCREMENT,
    saga_id            TEXT NOT NULL
                       REFERENCES effectus_saga_instances (saga_id) ON DELETE CASCADE,
    effect_id          TEXT NOT NULL,
    direction          TEXT NOT NULL CHECK (direction IN ('forward', 'compensation')),
    namespace          TEXT NOT NULL,
    execution_id       TEXT NOT NULL,
    destination        TEXT NOT NULL,
    verb               TEXT NOT NULL,
    contract_hash      TEXT NOT NULL
                       CHECK (length(contract_hash) = 64 AND contract_hash NOT GLOB '*[^0-9a-f]*'),
    delivery           TEXT NOT NULL CHECK (delivery IN ('at_most_once', 'at_least_once')),
    method             TEXT NOT NULL,
    path               TEXT NOT NULL,
    args_canonical     TEXT NOT NULL,
    args_hash          TEXT NOT NULL
                       CHECK (length(args_hash) = 64 AND args_hash NOT GLOB '*[^0-9a-f]*'),
    idempotency_key    TEXT NOT NULL UNIQUE
                       CHECK (length(idempotency_key) = 64
                              AND idempotency_key NOT GLOB '*[^0-9a-f]*'),
    fencing_resources  JSON_TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(fencing_resources)),
    timeout_ms         INTEGER NOT NULL CHECK (timeout_ms > 0),
    max_attempts       INTEGER NOT NULL CHECK (max_attempts >= 1),
    state              TEXT NOT NULL DEFAULT 'queued' CHECK (state IN (
                           'queued', 'in_flight', 'succeeded', 'retry_wait', 'failed_permanent',
                           'blocked_unknown', 'blocked_fence', 'blocked_contract', 'canceled')),
    attempt            INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    lease_owner        TEXT,
    lease_token        TEXT,
    lease_expires_at   TIMESTAMP_REAL,
    next_attempt_at    TIMESTAMP_REAL NOT NULL
                       DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
    grants             JSON_TEXT CHECK (grants IS NULL OR json_valid(grants)),
    uncertain_attempt  INTEGER,
    last_outcome       TEXT CHECK (last_outcome IN (
                           'success', 'retryable_failure_known_not_committed',
                           'permanent_failure', 'unknown_outcome', 'stale_fence')),
    last_error         TEXT,
    created_at         TIMESTAMP_REAL NOT NULL
                       DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
    updated_at         TIMESTAMP_REAL NOT NULL
                       DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
    fence_waits        INTEGER NOT NULL DEFAULT 0 CHECK (fence_waits >= 0),
    fence_wait_since   TIMESTAMP_REAL,
    budget_base        INTEGER DEFAULT 0 CHECK (budget_base >= 0),
    enqueued_by        TEXT,
    started_from       TEXT,
    enqueued_after     INTEGER,
    result             JSON_TEXT CHECK (result IS NULL OR json_valid(result)),
    succeeded_order    INTEGER CHECK (succeeded_order >= 1),
    -- one forward and one compensation dispatch per step
    UNIQUE (saga_id, effect_id, direction),
    -- the lease is all or nothing, and only an in-flight row holds one
    CONSTRAINT effectus_saga_outbox_lease
        CHECK ((lease_owner IS NULL) = (lease_token IS NULL)
               AND (lease_token IS NULL) = (lease_expires_at IS NULL)),
    CONSTRAINT effectus_saga_outbox_leased_in_flight
        CHECK ((state = 'in_flight') = (lease_token IS NOT NULL)),
    -- only a dispatch that was never claimed has attempt 0: queued, or canceled before a claim
    CONSTRAINT effectus_saga_outbox_attempted
        CHECK (state IN ('queued', 'canceled') OR attempt >= 1),
    CONSTRAINT effectus_saga_outbox_uncertain
        CHECK (uncertain_attempt IS NULL OR uncertain_attempt BETWEEN 1 AND attempt),
    CONSTRAINT effectus_saga_outbox_started_entry CHECK (
        (started_from IS NULL) = (enqueued_after IS NULL)
        AND (started_from IS NULL OR enqueued_by IS NOT NULL))
);

INSERT INTO effectus_saga_outbox_rebuilt
    (dispatch_id, saga_id, effect_id, direction, namespace, execution_id, destination, verb,
     contract_hash, delivery, method, path, args_canonical, args_hash, idempotency_key,
     fencing_resources, timeout_ms, max_attempts, state, attempt, lease_owner, lease_token,
     lease_expires_at, next_attempt_at, grants, uncertain_attempt, last_outcome, last_error,
     created_at, updated_at, fence_waits, fence_wait_since, budget_base, enqueued_by,
     started_from, enqueued_after, result, succeeded_order)
SELECT dispatch_id, saga_id, effect_id, direction, namespace, execution_id, destination, verb,
       contract_hash, delivery, method, path, args_canonical, args_hash, idempotency_key,
       fencing_resources, timeout_ms, max_attempts, state, attempt, lease_owner, lease_token,
       lease_expires_at, next_attempt_at, grants, uncertain_attempt, last_outcome, last_error,
       created_at, updated_at, fence_waits, fence_wait_since, budget_base, enqueued_by,
       started_from, enqueued_after, result, succeeded_order
FROM effectus_saga_outbox;

-- The old table's sequence, which is at least the highest id it ever handed out.
DELETE FROM sqlite_sequence WHERE name = 'effectus_saga_outbox_rebuilt';
INSERT INTO sqlite_sequence (name, seq)
SELECT 'effectus_saga_outbox_rebuilt', seq FROM sqlite_sequence
WHERE name = 'effectus_saga_outbox';

-- The attempts' triggers read the outbox: they are made again once it is back under its name.
DROP TRIGGER effectus_saga_attempts_sent;
DROP TRIGGER effectus_saga_attempts_no_direct_delete;
DROP TABLE effectus_saga_outbox;
ALTER TABLE effectus_saga_outbox_rebuilt RENAME TO effectus_saga_outbox;

CREATE INDEX effectus_saga_outbox_ready ON effectus_saga_outbox (destination, next_attempt_at)
    WHERE state IN ('queued', 'retry_wait');
CREATE INDEX effectus_saga_outbox_leased ON effectus_saga_outbox (lease_expires_at)
    WHERE state = 'in_flight';
CREATE INDEX effectus_saga_outbox_blocked_unknown ON effectus_saga_outbox (verb, dispatch_id)
    WHERE state = 'blocked_unknown';

CREATE TRIGGER effectus_saga_outbox_enqueue_kept
    BEFORE UPDATE OF saga_id, effect_id, direction, idempotency_key, args_hash, created_at,
        enqueued_by, started_from, enqueued_after
    ON effectus_saga_outbox
    WHEN OLD.enqueued_by IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'effectus_saga_outbox: a timeline entry is never rewritten');
END;

-- SQLite runs ON DELETE CASCADE after the saga row is gone, so a delete while the saga still
-- exists is a direct one.
CREATE TRIGGER effectus_saga_outbox_no_direct_delete
    BEFORE DELETE ON effectus_saga_outbox
    WHEN EXISTS (SELECT 1 FROM effectus_saga_instances WHERE saga_id = OLD.saga_id)
BEGIN
    SELECT RAISE(ABORT, 'effectus_saga_outbox rows leave only with their saga');
END;

CREATE TRIGGER effectus_saga_attempts_sent
    AFTER UPDATE OF sent_at ON effectus_saga_attempts
    WHEN OLD.sent_at IS NULL AND NEW.sent_at IS NOT NULL
BEGIN
    UPDATE effectus_saga_outbox
    SET grants = NEW.grants, fence_wait_since = NULL,
        updated_at = ((julianday('now') - 2440587.5) * 86400.0)
    WHERE dispatch_id = NEW.dispatch_id AND attempt = NEW.attempt;
END;

CREATE TRIGGER effectus_saga_attempts_no_direct_delete
    BEFORE DELETE ON effectus_saga_attempts
    WHEN EXISTS (SELECT 1 FROM effectus_saga_outbox WHERE dispatch_id = OLD.dispatch_id)
BEGIN
    SELECT RAISE(ABORT, 'effectus_saga_attempts rows leave only with their dispatch');
END;

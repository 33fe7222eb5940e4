-- effectusd schema v2 for SQLite: sagas, steps, the outbox, attempts, fencing and the timeline.
-- The same tables, columns, constraints and indexes as schema/migrations (PostgreSQL), in the
-- state PostgreSQL reaches after 10002_cancel_unclaimed_dispatch: nothing was ever released on
-- SQLite, so there is no older table to alter. 10002 exists here too, empty, so that both
-- stores report the same applied versions.
-- Applied by `effectusd migrate` in one BEGIN IMMEDIATE transaction.
--
-- Conventions (effectusd/store/sqlite/connection.py converts by declared type):
--   TIMESTAMP_REAL  Unix epoch seconds UTC (REAL); "now" is
--                   ((julianday('now') - 2440587.5) * 86400.0)
--   JSON_TEXT       JSON as text (PostgreSQL jsonb); json_valid() stands in for the jsonb cast
--   BOOLEAN         0 or 1
--   uuid            TEXT
-- A 64-hex-digit column is checked with length() and GLOB instead of a regular expression.
-- Not STRICT: a STRICT table admits only the base type names, and the converters need ours.

CREATE TABLE effectus_saga_instances (
    saga_id              TEXT PRIMARY KEY
                         CHECK (length(saga_id) = 64 AND saga_id NOT GLOB '*[^0-9a-f]*'),
    namespace            TEXT NOT NULL,
    execution_id         TEXT NOT NULL,
    plan_id              TEXT NOT NULL,
    plan_digest          TEXT NOT NULL
                         CHECK (length(plan_digest) = 64 AND plan_digest NOT GLOB '*[^0-9a-f]*'),
    plan                 JSON_TEXT NOT NULL CHECK (json_valid(plan)),
    facts                JSON_TEXT NOT NULL CHECK (json_valid(facts)),
    facts_hash           TEXT NOT NULL
                         CHECK (length(facts_hash) = 64 AND facts_hash NOT GLOB '*[^0-9a-f]*'),
    state                TEXT NOT NULL DEFAULT 'running' CHECK (state IN (
                             'running', 'completed', 'compensating', 'compensated', 'failed',
                             'blocked_unknown', 'blocked_fence', 'blocked_compensation',
                             'blocked_contract')),
    stop_reason          TEXT,
    cancel_requested_at  TIMESTAMP_REAL,
    cancel_requested_by  TEXT,
    revision             INTEGER NOT NULL DEFAULT 1 CHECK (revision >= 1),
    created_at           TIMESTAMP_REAL NOT NULL
                         DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
    updated_at           TIMESTAMP_REAL NOT NULL
                         DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
    finished_at          TIMESTAMP_REAL,
    UNIQUE (namespace, execution_id, plan_id),
    -- a cancel request records who asked, or neither is set
    CONSTRAINT effectus_saga_instances_cancel_request
        CHECK ((cancel_requested_at IS NULL) = (cancel_requested_by IS NULL)),
    -- terminal states carry their finish time; live and blocked ones do not
    CONSTRAINT effectus_saga_instances_finished
        CHECK ((finished_at IS NOT NULL) = (state IN ('completed', 'compensated', 'failed'))),
    -- every blocked or failed saga says why
    CONSTRAINT effectus_saga_instances_stop_reason
        CHECK (state NOT IN ('failed', 'blocked_unknown', 'blocked_fence',
                             'blocked_compensation', 'blocked_contract')
               OR stop_reason IS NOT NULL)
);

-- Operators list by state; terminal sagas are found by age for pruning.
CREATE INDEX effectus_saga_instances_live ON effectus_saga_instances (state, updated_at)
    WHERE state NOT IN ('completed', 'compensated', 'failed');
CREATE INDEX effectus_saga_instances_finished ON effectus_saga_instances (finished_at)
    WHERE finished_at IS NOT NULL;

CREATE TABLE effectus_saga_steps (
    saga_id        TEXT NOT NULL
                   REFERENCES effectus_saga_instances (saga_id) ON DELETE CASCADE,
    effect_id      TEXT NOT NULL,
    sequence       INTEGER NOT NULL CHECK (sequence >= 0),
    verb           TEXT NOT NULL,
    contract_hash  TEXT NOT NULL
                   CHECK (length(contract_hash) = 64 AND contract_hash NOT GLOB '*[^0-9a-f]*'),
    args           JSON_TEXT CHECK (args IS NULL OR json_valid(args)),
    args_hash      TEXT CHECK (length(args_hash) = 64 AND args_hash NOT GLOB '*[^0-9a-f]*'),
    compensation   JSON_TEXT CHECK (compensation IS NULL OR json_valid(compensation)),
    fencing        JSON_TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(fencing)),
    state          TEXT NOT NULL DEFAULT 'pending' CHECK (state IN (
                       'pending', 'in_progress', 'succeeded', 'failed', 'compensating',
                       'compensated')),
    result         JSON_TEXT CHECK (result IS NULL OR json_valid(result)),
    updated_at     TIMESTAMP_REAL NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
    PRIMARY KEY (saga_id, effect_id),
    UNIQUE (saga_id, sequence),
    -- resolved arguments and their hash come together
    CONSTRAINT effectus_saga_steps_args CHECK ((args IS NULL) = (args_hash IS NULL)),
    -- a step that has run has resolved arguments
    CONSTRAINT effectus_saga_steps_started CHECK (state = 'pending' OR args IS NOT NULL)
);

CREATE TABLE effectus_saga_outbox (
    -- AUTOINCREMENT: a pruned dispatch's id is never handed out again (attempts, grants and
    -- destination ledgers name dispatches by id).
    dispatch_id        INTEGER PRIMARY KEY AUTOINCREMENT,
    saga_id            TEXT NOT NULL,
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
    FOREIGN KEY (saga_id, effect_id) REFERENCES effectus_saga_steps (saga_id, effect_id)
        ON DELETE CASCADE,
    -- one forward and one compensation dispatch per step
    UNIQUE (saga_id, effect_id, direction),
    -- the lease is all or nothing, and only an in-flight row holds one
    CONSTRAINT effectus_saga_outbox_lease
        CHECK ((lease_owner IS NULL) = (lease_token IS NULL)
               AND (lease_token IS NULL) = (lease_expires_at IS NULL)),
    CONSTRAINT effectus_saga_outbox_leased_in_flight
        CHECK ((state = 'in_flight') = (lease_token IS NOT NULL)),
    -- only a dispatch that was never claimed has attempt 0: queued, or canceled before a claim
    -- (PostgreSQL 10002)
    CONSTRAINT effectus_saga_outbox_attempted
        CHECK (state IN ('queued', 'canceled') OR attempt >= 1),
    CONSTRAINT effectus_saga_outbox_uncertain
        CHECK (uncertain_attempt IS NULL OR uncertain_attempt BETWEEN 1 AND attempt)
);

-- The claim path: only rows that can become due sit in these indexes.
CREATE INDEX effectus_saga_outbox_ready ON effectus_saga_outbox (destination, next_attempt_at)
    WHERE state IN ('queued', 'retry_wait');
CREATE INDEX effectus_saga_outbox_leased ON effectus_saga_outbox (lease_expires_at)
    WHERE state = 'in_flight';
CREATE INDEX effectus_saga_outbox_saga ON effectus_saga_outbox (saga_id);

CREATE TABLE effectus_saga_attempts (
    dispatch_id        INTEGER NOT NULL
                       REFERENCES effectus_saga_outbox (dispatch_id) ON DELETE CASCADE,
    attempt            INTEGER NOT NULL CHECK (attempt >= 1),
    request_id         TEXT NOT NULL UNIQUE,
    lease_owner        TEXT NOT NULL,
    lease_token        TEXT NOT NULL,
    claimed_at         TIMESTAMP_REAL NOT NULL
                       DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
    lease_expires_at   TIMESTAMP_REAL NOT NULL,
    grants             JSON_TEXT CHECK (grants IS NULL OR json_valid(grants)),
    fencing_status     TEXT CHECK (fencing_status IN (
                           'not_requested', 'local_lock_only', 'propagated', 'acknowledged',
                           'stale_rejected')),
    sent_at            TIMESTAMP_REAL,
    outcome            TEXT CHECK (outcome IN (
                           'success', 'retryable_failure_known_not_committed',
                           'permanent_failure', 'unknown_outcome', 'stale_fence')),
    settled_by         TEXT CHECK (settled_by IN ('executor', 'reclaim', 'operator', 'guard')),
    status_code        INTEGER,
    error              TEXT,
    evidence           JSON_TEXT CHECK (evidence IS NULL OR json_valid(evidence)),
    completed_at       TIMESTAMP_REAL,
    late               BOOLEAN NOT NULL DEFAULT 0 CHECK (late IN (0, 1)),
    late_outcome       TEXT CHECK (late_outcome IN (
                           'success', 'retryable_failure_known_not_committed',
                           'permanent_failure', 'unknown_outcome', 'stale_fence')),
    late_status_code   INTEGER,
    late_error         TEXT,
    late_evidence      JSON_TEXT CHECK (late_evidence IS NULL OR json_valid(late_evidence)),
    late_at            TIMESTAMP_REAL,
    PRIMARY KEY (dispatch_id, attempt),
    -- an outcome, who settled it and when come together
    CONSTRAINT effectus_saga_attempts_settled
        CHECK ((outcome IS NULL) = (completed_at IS NULL)
               AND (outcome IS NULL) = (settled_by IS NULL)),
    -- a late completion is recorded whole
    CONSTRAINT effectus_saga_attempts_late
        CHECK (late = (late_at IS NOT NULL) AND (late_outcome IS NULL OR late)),
    -- grants are written together with the write-ahead mark
    CONSTRAINT effectus_saga_attempts_grants CHECK (grants IS NULL OR sent_at IS NOT NULL)
);

-- The write-ahead (queries/write_ahead.sql) marks attempts; a dispatch row carries the grants
-- its current attempt was sent with. PostgreSQL writes both in one statement (two CTEs); a
-- SQLite statement changes one table, so the dispatch row follows its attempt here, in the
-- same statement and transaction.
CREATE TRIGGER effectus_saga_attempts_sent
    AFTER UPDATE OF sent_at ON effectus_saga_attempts
    WHEN OLD.sent_at IS NULL AND NEW.sent_at IS NOT NULL
BEGIN
    UPDATE effectus_saga_outbox
    SET grants = NEW.grants, updated_at = ((julianday('now') - 2440587.5) * 86400.0)
    WHERE dispatch_id = NEW.dispatch_id AND attempt = NEW.attempt;
END;

CREATE TABLE effectus_fencing_counters (
    resource    TEXT PRIMARY KEY,
    last_token  INTEGER NOT NULL CHECK (last_token >= 0),  -- 0: created, never granted
    updated_at  TIMESTAMP_REAL NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0)
);

-- Tokens only ever increase: refuse any write that would lower one. (SQLite 3.40 takes only a
-- literal message in RAISE, so it cannot name the resource or the values.)
CREATE TRIGGER effectus_fencing_counters_monotonic
    BEFORE UPDATE ON effectus_fencing_counters
    WHEN NEW.last_token < OLD.last_token
BEGIN
    SELECT RAISE(ABORT, 'effectus_fencing_counters: a fencing token may not decrease');
END;

CREATE TABLE effectus_fencing_leases (
    resource            TEXT PRIMARY KEY,
    holder_dispatch_id  INTEGER NOT NULL,
    holder_lease_token  TEXT NOT NULL,
    token               INTEGER NOT NULL CHECK (token >= 1),
    acquired_at         TIMESTAMP_REAL NOT NULL
                        DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
    expires_at          TIMESTAMP_REAL NOT NULL
);

-- Every token a lease is given is recorded in its resource's counter, which must rise: a
-- token is handed out once, and the counter (unlike the lease) outlives the holder. With
-- queries/acquire_fence.sql (token = counter + 1) this is PostgreSQL's effectus_acquire_fence:
-- SQLite has one writer at a time, so the counter needs no row lock.
CREATE TRIGGER effectus_fencing_leases_token_inserted
    AFTER INSERT ON effectus_fencing_leases
BEGIN
    SELECT RAISE(ABORT, 'effectus_fencing_leases: this fencing token was already handed out')
    WHERE NEW.token <= (SELECT last_token FROM effectus_fencing_counters
                        WHERE resource = NEW.resource);
    INSERT INTO effectus_fencing_counters (resource, last_token, updated_at)
    VALUES (NEW.resource, NEW.token, ((julianday('now') - 2440587.5) * 86400.0))
    ON CONFLICT (resource) DO UPDATE
    SET last_token = excluded.last_token, updated_at = excluded.updated_at;
END;

CREATE TRIGGER effectus_fencing_leases_token_updated
    AFTER UPDATE OF token ON effectus_fencing_leases
BEGIN
    SELECT RAISE(ABORT, 'effectus_fencing_leases: this fencing token was already handed out')
    WHERE NEW.token <= (SELECT last_token FROM effectus_fencing_counters
                        WHERE resource = NEW.resource);
    INSERT INTO effectus_fencing_counters (resource, last_token, updated_at)
    VALUES (NEW.resource, NEW.token, ((julianday('now') - 2440587.5) * 86400.0))
    ON CONFLICT (resource) DO UPDATE
    SET last_token = excluded.last_token, updated_at = excluded.updated_at;
END;

CREATE TABLE effectus_saga_events (
    event_id     INTEGER PRIMARY KEY AUTOINCREMENT,
    saga_id      TEXT NOT NULL
                 REFERENCES effectus_saga_instances (saga_id) ON DELETE CASCADE,
    effect_id    TEXT,
    direction    TEXT CHECK (direction IN ('forward', 'compensation')),
    attempt      INTEGER,
    kind         TEXT NOT NULL,
    from_state   TEXT,
    to_state     TEXT,
    actor        TEXT NOT NULL,
    evidence     TEXT,
    detail       JSON_TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(detail)),
    at           TIMESTAMP_REAL NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0)
);

CREATE INDEX effectus_saga_events_saga ON effectus_saga_events (saga_id, event_id);

-- The timeline is append-only: rows leave only with their saga (prune).
CREATE TRIGGER effectus_saga_events_append_only
    BEFORE UPDATE ON effectus_saga_events
BEGIN
    SELECT RAISE(ABORT, 'effectus_saga_events is append-only');
END;

-- Timeline rows are never deleted one by one: only with their saga. SQLite runs ON DELETE
-- CASCADE after the saga row is gone, so a delete while the saga still exists is a direct one.
CREATE TRIGGER effectus_saga_events_no_direct_delete
    BEFORE DELETE ON effectus_saga_events
    WHEN EXISTS (SELECT 1 FROM effectus_saga_instances WHERE saga_id = OLD.saga_id)
BEGIN
    SELECT RAISE(ABORT, 'effectus_saga_events rows leave only with their saga');
END;

-- effectusd schema v2: sagas, steps, the outbox, attempts, fencing and the timeline.
-- Applied by `effectusd migrate` inside one transaction under an advisory lock.

CREATE TABLE effectus_saga_instances (
    saga_id              text PRIMARY KEY CHECK (saga_id ~ '^[0-9a-f]{64}$'),
    namespace            text NOT NULL,
    execution_id         text NOT NULL,
    plan_id              text NOT NULL,
    plan_digest          text NOT NULL CHECK (plan_digest ~ '^[0-9a-f]{64}$'),
    plan                 jsonb NOT NULL,
    facts                jsonb NOT NULL,
    facts_hash           text NOT NULL CHECK (facts_hash ~ '^[0-9a-f]{64}$'),
    state                text NOT NULL DEFAULT 'running' CHECK (state IN (
                             'running', 'completed', 'compensating', 'compensated', 'failed',
                             'blocked_unknown', 'blocked_fence', 'blocked_compensation',
                             'blocked_contract')),
    stop_reason          text,
    cancel_requested_at  timestamptz,
    cancel_requested_by  text,
    revision             bigint NOT NULL DEFAULT 1 CHECK (revision >= 1),
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    finished_at          timestamptz,
    UNIQUE (namespace, execution_id, plan_id),
    -- a cancel request records who asked, or neither is set
    CHECK ((cancel_requested_at IS NULL) = (cancel_requested_by IS NULL)),
    -- terminal states carry their finish time; live and blocked ones do not
    CHECK ((finished_at IS NOT NULL) = (state IN ('completed', 'compensated', 'failed'))),
    -- every blocked or failed saga says why
    CHECK (state NOT IN ('failed', 'blocked_unknown', 'blocked_fence', 'blocked_compensation',
                         'blocked_contract') OR stop_reason IS NOT NULL)
);

-- Operators list by state; terminal sagas are found by age for pruning.
CREATE INDEX effectus_saga_instances_live ON effectus_saga_instances (state, updated_at)
    WHERE state NOT IN ('completed', 'compensated', 'failed');
CREATE INDEX effectus_saga_instances_finished ON effectus_saga_instances (finished_at)
    WHERE finished_at IS NOT NULL;

CREATE TABLE effectus_saga_steps (
    saga_id        text NOT NULL REFERENCES effectus_saga_instances (saga_id) ON DELETE CASCADE,
    effect_id      text NOT NULL,
    sequence       integer NOT NULL CHECK (sequence >= 0),
    verb           text NOT NULL,
    contract_hash  text NOT NULL CHECK (contract_hash ~ '^[0-9a-f]{64}$'),
    args           jsonb,
    args_hash      text CHECK (args_hash ~ '^[0-9a-f]{64}$'),
    compensation   jsonb,
    fencing        jsonb NOT NULL DEFAULT '[]',
    state          text NOT NULL DEFAULT 'pending' CHECK (state IN (
                       'pending', 'in_progress', 'succeeded', 'failed', 'compensating',
                       'compensated')),
    result         jsonb,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (saga_id, effect_id),
    UNIQUE (saga_id, sequence),
    -- resolved arguments and their hash come together
    CHECK ((args IS NULL) = (args_hash IS NULL)),
    -- a step that has run has resolved arguments
    CHECK (state = 'pending' OR args IS NOT NULL)
);

CREATE TABLE effectus_saga_outbox (
    dispatch_id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    saga_id            text NOT NULL,
    effect_id          text NOT NULL,
    direction          text NOT NULL CHECK (direction IN ('forward', 'compensation')),
    namespace          text NOT NULL,
    execution_id       text NOT NULL,
    destination        text NOT NULL,
    verb               text NOT NULL,
    contract_hash      text NOT NULL CHECK (contract_hash ~ '^[0-9a-f]{64}$'),
    delivery           text NOT NULL CHECK (delivery IN ('at_most_once', 'at_least_once')),
    method             text NOT NULL,
    path               text NOT NULL,
    args_canonical     text NOT NULL,
    args_hash          text NOT NULL CHECK (args_hash ~ '^[0-9a-f]{64}$'),
    idempotency_key    text NOT NULL UNIQUE CHECK (idempotency_key ~ '^[0-9a-f]{64}$'),
    fencing_resources  jsonb NOT NULL DEFAULT '[]',
    timeout_ms         integer NOT NULL CHECK (timeout_ms > 0),
    max_attempts       integer NOT NULL CHECK (max_attempts >= 1),
    state              text NOT NULL DEFAULT 'queued' CHECK (state IN (
                           'queued', 'in_flight', 'succeeded', 'retry_wait', 'failed_permanent',
                           'blocked_unknown', 'blocked_fence', 'blocked_contract', 'canceled')),
    attempt            integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    lease_owner        text,
    lease_token        uuid,
    lease_expires_at   timestamptz,
    next_attempt_at    timestamptz NOT NULL DEFAULT now(),
    grants             jsonb,
    uncertain_attempt  integer,
    last_outcome       text CHECK (last_outcome IN (
                           'success', 'retryable_failure_known_not_committed',
                           'permanent_failure', 'unknown_outcome', 'stale_fence')),
    last_error         text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (saga_id, effect_id) REFERENCES effectus_saga_steps (saga_id, effect_id)
        ON DELETE CASCADE,
    -- one forward and one compensation dispatch per step
    UNIQUE (saga_id, effect_id, direction),
    -- the lease is all or nothing, and only an in-flight row holds one
    CHECK ((lease_owner IS NULL) = (lease_token IS NULL)
           AND (lease_token IS NULL) = (lease_expires_at IS NULL)),
    CHECK ((state = 'in_flight') = (lease_token IS NOT NULL)),
    CHECK (state = 'queued' OR attempt >= 1),
    CHECK (uncertain_attempt IS NULL OR uncertain_attempt BETWEEN 1 AND attempt)
);

-- The claim path: only rows that can become due sit in these indexes.
CREATE INDEX effectus_saga_outbox_ready ON effectus_saga_outbox (destination, next_attempt_at)
    WHERE state IN ('queued', 'retry_wait');
CREATE INDEX effectus_saga_outbox_leased ON effectus_saga_outbox (lease_expires_at)
    WHERE state = 'in_flight';
CREATE INDEX effectus_saga_outbox_saga ON effectus_saga_outbox (saga_id);

CREATE TABLE effectus_saga_attempts (
    dispatch_id        bigint NOT NULL REFERENCES effectus_saga_outbox (dispatch_id)
                           ON DELETE CASCADE,
    attempt            integer NOT NULL CHECK (attempt >= 1),
    request_id         uuid NOT NULL UNIQUE,
    lease_owner        text NOT NULL,
    lease_token        uuid NOT NULL,
    claimed_at         timestamptz NOT NULL DEFAULT now(),
    lease_expires_at   timestamptz NOT NULL,
    grants             jsonb,
    fencing_status     text CHECK (fencing_status IN (
                           'not_requested', 'local_lock_only', 'propagated', 'acknowledged',
                           'stale_rejected')),
    sent_at            timestamptz,
    outcome            text CHECK (outcome IN (
                           'success', 'retryable_failure_known_not_committed',
                           'permanent_failure', 'unknown_outcome', 'stale_fence')),
    settled_by         text CHECK (settled_by IN ('executor', 'reclaim', 'operator', 'guard')),
    status_code        integer,
    error              text,
    evidence           jsonb,
    completed_at       timestamptz,
    late               boolean NOT NULL DEFAULT false,
    late_outcome       text CHECK (late_outcome IN (
                           'success', 'retryable_failure_known_not_committed',
                           'permanent_failure', 'unknown_outcome', 'stale_fence')),
    late_status_code   integer,
    late_error         text,
    late_evidence      jsonb,
    late_at            timestamptz,
    PRIMARY KEY (dispatch_id, attempt),
    -- an outcome, who settled it and when come together
    CHECK ((outcome IS NULL) = (completed_at IS NULL)
           AND (outcome IS NULL) = (settled_by IS NULL)),
    -- a late completion is recorded whole
    CHECK (late = (late_at IS NOT NULL) AND (late_outcome IS NULL OR late)),
    -- grants are written together with the write-ahead mark
    CHECK (grants IS NULL OR sent_at IS NOT NULL)
);

CREATE TABLE effectus_fencing_counters (
    resource    text PRIMARY KEY,
    last_token  bigint NOT NULL CHECK (last_token >= 0),  -- 0: created, never granted
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Tokens only ever increase: refuse any write that would lower one.
CREATE FUNCTION effectus_fencing_counters_monotonic() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.last_token < OLD.last_token THEN
        RAISE EXCEPTION 'fencing token for % may not decrease (% -> %)',
            OLD.resource, OLD.last_token, NEW.last_token;
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER effectus_fencing_counters_monotonic
    BEFORE UPDATE ON effectus_fencing_counters
    FOR EACH ROW EXECUTE FUNCTION effectus_fencing_counters_monotonic();

CREATE TABLE effectus_fencing_leases (
    resource            text PRIMARY KEY,
    holder_dispatch_id  bigint NOT NULL,
    holder_lease_token  uuid NOT NULL,
    token               bigint NOT NULL CHECK (token >= 1),
    acquired_at         timestamptz NOT NULL DEFAULT now(),
    expires_at          timestamptz NOT NULL
);

CREATE TABLE effectus_saga_events (
    event_id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    saga_id      text NOT NULL REFERENCES effectus_saga_instances (saga_id) ON DELETE CASCADE,
    effect_id    text,
    direction    text CHECK (direction IN ('forward', 'compensation')),
    attempt      integer,
    kind         text NOT NULL,
    from_state   text,
    to_state     text,
    actor        text NOT NULL,
    evidence     text,
    detail       jsonb NOT NULL DEFAULT '{}',
    at           timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE INDEX effectus_saga_events_saga ON effectus_saga_events (saga_id, event_id);

-- The timeline is append-only: rows leave only with their saga (prune).
CREATE FUNCTION effectus_saga_events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'effectus_saga_events is append-only';
END;
$$;

CREATE TRIGGER effectus_saga_events_append_only
    BEFORE UPDATE ON effectus_saga_events
    FOR EACH ROW EXECUTE FUNCTION effectus_saga_events_append_only();

-- Take the fencing lease on one resource and the next token, or NULL when another live holder
-- has it. The counter row lock serialises every acquirer of the resource, so a token is never
-- handed out twice and a lease is never taken over while it is live.
CREATE FUNCTION effectus_acquire_fence(
    p_resource text, p_dispatch_id bigint, p_lease_token uuid, p_expires_at timestamptz
) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    granted bigint;
BEGIN
    INSERT INTO effectus_fencing_counters (resource, last_token)
    VALUES (p_resource, 0) ON CONFLICT (resource) DO NOTHING;
    PERFORM 1 FROM effectus_fencing_counters WHERE resource = p_resource FOR UPDATE;
    IF EXISTS (
        SELECT 1 FROM effectus_fencing_leases
        WHERE resource = p_resource AND expires_at > clock_timestamp()
          AND NOT (holder_dispatch_id = p_dispatch_id AND holder_lease_token = p_lease_token)
    ) THEN
        RETURN NULL;
    END IF;
    UPDATE effectus_fencing_counters
    SET last_token = last_token + 1, updated_at = now()
    WHERE resource = p_resource
    RETURNING last_token INTO granted;
    INSERT INTO effectus_fencing_leases
        (resource, holder_dispatch_id, holder_lease_token, token, acquired_at, expires_at)
    VALUES (p_resource, p_dispatch_id, p_lease_token, granted, now(), p_expires_at)
    ON CONFLICT (resource) DO UPDATE
    SET holder_dispatch_id = excluded.holder_dispatch_id,
        holder_lease_token = excluded.holder_lease_token,
        token = excluded.token,
        acquired_at = excluded.acquired_at,
        expires_at = excluded.expires_at;
    RETURN granted;
END;
$$;

-- Timeline rows are never deleted one by one: only with their saga (ON DELETE CASCADE runs
-- inside the referential-integrity trigger, one trigger level deeper than a direct DELETE).
CREATE FUNCTION effectus_saga_events_no_direct_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF pg_trigger_depth() < 2 THEN
        RAISE EXCEPTION 'effectus_saga_events rows leave only with their saga';
    END IF;
    RETURN OLD;
END;
$$;

CREATE TRIGGER effectus_saga_events_no_direct_delete
    BEFORE DELETE ON effectus_saga_events
    FOR EACH ROW EXECUTE FUNCTION effectus_saga_events_no_direct_delete();

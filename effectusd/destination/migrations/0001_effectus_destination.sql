-- The destination kit's tables. They live in the application's own database, next to its
-- business tables, so that the ledger row and the business mutation commit together.

-- One row per idempotency key: the dedupe record and the stored terminal answer.
-- The kit writes 'in_progress' and 'completed' in the same transaction, so other sessions only
-- ever see 'completed' rows; 'in_progress' marks the row while its mutation runs.
CREATE TABLE effectus_dest_keys (
    idempotency_key       text PRIMARY KEY,
    argument_hash         text NOT NULL,
    state                 text NOT NULL CHECK (state IN ('in_progress', 'completed')),
    status_code           integer CHECK (status_code BETWEEN 200 AND 599),
    response_body         bytea,
    outcome               text,       -- X-Effectus-Outcome of the stored answer; NULL on 2xx
    fencing_acknowledged  boolean NOT NULL DEFAULT false,
    -- Who asked first: evidence for an operator settling a blocked_unknown dispatch.
    saga_id               text NOT NULL,
    effect_id             text NOT NULL,
    direction             text NOT NULL,
    verb                  text NOT NULL,
    request_id            text NOT NULL,
    attempt               bigint NOT NULL,
    created_at            timestamptz NOT NULL DEFAULT now(),
    completed_at          timestamptz,
    expires_at            timestamptz NOT NULL,  -- only makes the row prunable; never ignored
    CHECK ((state = 'completed') = (status_code IS NOT NULL AND response_body IS NOT NULL))
);

CREATE INDEX effectus_dest_keys_expires_at ON effectus_dest_keys (expires_at);

-- The highest fencing token accepted per resource. Never lowered.
CREATE TABLE effectus_dest_watermarks (
    resource    text PRIMARY KEY,
    token       bigint NOT NULL CHECK (token >= 0),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

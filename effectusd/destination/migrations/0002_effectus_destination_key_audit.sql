-- What an operator did to a stored answer, and why: a forgotten key's record lives on here.
-- Never pruned: forgetting is rare, and the record is the evidence if a double effect follows.
CREATE TABLE effectus_dest_key_audit (
    audit_id              bigserial PRIMARY KEY,
    idempotency_key       text NOT NULL,
    action                text NOT NULL CHECK (action IN ('forget')),
    actor                 text NOT NULL,
    evidence              text NOT NULL,
    forced                boolean NOT NULL,  -- the stored answer was not a permanent failure
    -- The record as it was when forgotten.
    argument_hash         text NOT NULL,
    status_code           integer NOT NULL,
    response_body         bytea NOT NULL,
    outcome               text,
    saga_id               text NOT NULL,
    effect_id             text NOT NULL,
    direction             text NOT NULL,
    verb                  text NOT NULL,
    attempt               bigint NOT NULL,
    key_created_at        timestamptz NOT NULL,
    key_completed_at      timestamptz,
    at                    timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX effectus_dest_key_audit_key ON effectus_dest_key_audit (idempotency_key, audit_id);

-- The fencing authority: one PostgreSQL database that issues the fencing tokens of every store
-- of a configuration ([fencing] url; docs/design.md section 8, "One authority for several
-- stores"). Its counters and leases are the stores' tables under the same names, so the token
-- layout is the stores' own functions (the next migration is store migration 10023 itself);
-- a lease also names the store, saga and daemon that hold it, for a dispatch that waits.
CREATE TABLE effectus_fencing_counters (
    resource    text PRIMARY KEY,
    last_token  bigint NOT NULL CHECK (last_token >= 0),  -- 0: created, never granted
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Tokens only ever increase, and a counter is never deleted (tokens would start again).
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

CREATE FUNCTION effectus_fencing_counters_kept() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'fencing counter for % may not be deleted (tokens would start again)',
        OLD.resource;
END;
$$;

CREATE TRIGGER effectus_fencing_counters_kept
    BEFORE DELETE ON effectus_fencing_counters
    FOR EACH ROW EXECUTE FUNCTION effectus_fencing_counters_kept();

CREATE TABLE effectus_fencing_leases (
    resource            text PRIMARY KEY,
    holder_dispatch_id  bigint NOT NULL,
    holder_lease_token  uuid NOT NULL,
    token               bigint NOT NULL CHECK (token >= 1),
    acquired_at         timestamptz NOT NULL DEFAULT now(),
    expires_at          timestamptz NOT NULL,
    holder_store        text,
    holder_saga_id      text,
    holder_owner        text
);

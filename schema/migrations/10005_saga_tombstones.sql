-- What is left of a deleted saga: its identity. Idempotency keys derive from the saga id, and
-- the saga id from (namespace, execution_id, plan_id); a new saga with a pruned saga's identity
-- would send the same keys, and a destination that still remembers them would answer with the
-- old saga's results. Submit refuses an identity that has a tombstone; `effectusd prune`
-- deletes tombstones once they are older than --keep-tombstones.
CREATE TABLE effectus_saga_tombstones (
    saga_id       text PRIMARY KEY CHECK (saga_id ~ '^[0-9a-f]{64}$'),
    namespace     text NOT NULL,
    execution_id  text NOT NULL,
    plan_id       text NOT NULL,
    plan_digest   text NOT NULL,
    facts_hash    text NOT NULL,
    state         text NOT NULL,
    finished_at   timestamptz,  -- NULL only for a saga deleted by hand before it finished
    pruned_at     timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX effectus_saga_tombstones_pruned ON effectus_saga_tombstones (pruned_at);

-- Written by the delete itself, so that no way of deleting a saga (prune, or by hand) can
-- forget it. TRUNCATE, a deliberate reset, is not a row delete and leaves none.
CREATE FUNCTION effectus_saga_tombstones_write() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO effectus_saga_tombstones
        (saga_id, namespace, execution_id, plan_id, plan_digest, facts_hash, state, finished_at)
    SELECT saga_id, namespace, execution_id, plan_id, plan_digest, facts_hash, state, finished_at
    FROM gone
    ON CONFLICT (saga_id) DO UPDATE
    SET namespace = EXCLUDED.namespace, execution_id = EXCLUDED.execution_id,
        plan_id = EXCLUDED.plan_id, plan_digest = EXCLUDED.plan_digest,
        facts_hash = EXCLUDED.facts_hash, state = EXCLUDED.state,
        finished_at = EXCLUDED.finished_at, pruned_at = EXCLUDED.pruned_at;
    RETURN NULL;
END;
$$;

CREATE TRIGGER effectus_saga_tombstones_write
    AFTER DELETE ON effectus_saga_instances
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION effectus_saga_tombstones_write();

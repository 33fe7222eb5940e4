-- What is left of a deleted saga: its identity. Idempotency keys derive from the saga id, and
-- the saga id from (namespace, execution_id, plan_id); a new saga with a pruned saga's identity
-- would send the same keys, and a destination that still remembers them would answer with the
-- old saga's results. Submit refuses an identity that has a tombstone; `effectusd prune`
-- deletes tombstones once they are older than --keep-tombstones.
CREATE TABLE effectus_saga_tombstones (
    saga_id       TEXT PRIMARY KEY
                  CHECK (length(saga_id) = 64 AND saga_id NOT GLOB '*[^0-9a-f]*'),
    namespace     TEXT NOT NULL,
    execution_id  TEXT NOT NULL,
    plan_id       TEXT NOT NULL,
    plan_digest   TEXT NOT NULL,
    facts_hash    TEXT NOT NULL,
    state         TEXT NOT NULL,
    finished_at   TIMESTAMP_REAL,  -- NULL only for a saga deleted by hand before it finished
    pruned_at     TIMESTAMP_REAL NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0)
);

CREATE INDEX effectus_saga_tombstones_pruned ON effectus_saga_tombstones (pruned_at);

-- Written by the delete itself, so that no way of deleting a saga (prune, or by hand) can
-- forget it.
CREATE TRIGGER effectus_saga_tombstones_write
AFTER DELETE ON effectus_saga_instances
BEGIN
    INSERT INTO effectus_saga_tombstones
        (saga_id, namespace, execution_id, plan_id, plan_digest, facts_hash, state, finished_at,
         pruned_at)
    VALUES
        (OLD.saga_id, OLD.namespace, OLD.execution_id, OLD.plan_id, OLD.plan_digest,
         OLD.facts_hash, OLD.state, OLD.finished_at,
         ((julianday('now') - 2440587.5) * 86400.0))
    ON CONFLICT (saga_id) DO UPDATE
    SET namespace = excluded.namespace, execution_id = excluded.execution_id,
        plan_id = excluded.plan_id, plan_digest = excluded.plan_digest,
        facts_hash = excluded.facts_hash, state = excluded.state,
        finished_at = excluded.finished_at, pruned_at = excluded.pruned_at;
END;

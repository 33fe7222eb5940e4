-- A next step whose arguments cannot be resolved (a missing $result path, a schema or path
-- rule broken by an earlier result) fails with nothing sent: a failed step may have no
-- resolved arguments. 10001 refused that row, which wedged the recorder on it.
-- SQLite cannot alter a CHECK, so the table is rebuilt (the migration runner turns foreign
-- key enforcement off around each migration and checks the keys before committing).
CREATE TABLE effectus_saga_steps_rebuilt (
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
    -- a step that has run has resolved arguments; one that failed may have failed to
    -- resolve them (nothing was sent)
    CONSTRAINT effectus_saga_steps_started
        CHECK (state IN ('pending', 'failed') OR args IS NOT NULL)
);

INSERT INTO effectus_saga_steps_rebuilt
    (saga_id, effect_id, sequence, verb, contract_hash, args, args_hash, compensation, fencing,
     state, result, updated_at)
SELECT saga_id, effect_id, sequence, verb, contract_hash, args, args_hash, compensation, fencing,
       state, result, updated_at
FROM effectus_saga_steps;

DROP TABLE effectus_saga_steps;

ALTER TABLE effectus_saga_steps_rebuilt RENAME TO effectus_saga_steps;

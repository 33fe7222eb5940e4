-- The same version as PostgreSQL's 10017: one row per blocked attempt of a verb with a probe,
-- written by the daemon's probe loop under the write lock (see there).
CREATE TABLE effectus_dispatch_probes (
    dispatch_id    INTEGER NOT NULL REFERENCES effectus_saga_outbox (dispatch_id)
                       ON DELETE CASCADE,
    attempt        INTEGER NOT NULL CHECK (attempt >= 1),
    probes         INTEGER NOT NULL DEFAULT 0 CHECK (probes >= 0),
    next_probe_at  TIMESTAMP_REAL,
    last_status    INTEGER,
    given_up_at    TIMESTAMP_REAL,
    created_at     TIMESTAMP_REAL NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
    updated_at     TIMESTAMP_REAL NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
    PRIMARY KEY (dispatch_id, attempt),
    CHECK (given_up_at IS NULL OR next_probe_at IS NULL)
);

CREATE INDEX effectus_dispatch_probes_due ON effectus_dispatch_probes (next_probe_at)
    WHERE next_probe_at IS NOT NULL;
CREATE INDEX effectus_saga_outbox_blocked_unknown ON effectus_saga_outbox (verb, dispatch_id)
    WHERE state = 'blocked_unknown';

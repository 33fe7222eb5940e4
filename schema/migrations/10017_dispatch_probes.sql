-- Reconciliation probes (docs/design.md section 7, Probes): one row per blocked attempt of a
-- verb with a probe, written by the daemon's probe loop, never by the recorder. next_probe_at
-- is when it is asked next (NULL: no more probes: settled, given up, or the dispatch moved
-- on); a daemon taking a due row moves it on by `every` in the same statement, so two daemons
-- never probe one dispatch at once. The outbox's own rows are written only through the
-- engine's settle, as an operator's resolve writes them.
CREATE TABLE effectus_dispatch_probes (
    dispatch_id    bigint NOT NULL REFERENCES effectus_saga_outbox (dispatch_id)
                       ON DELETE CASCADE,
    attempt        integer NOT NULL CHECK (attempt >= 1),
    probes         integer NOT NULL DEFAULT 0 CHECK (probes >= 0),
    next_probe_at  timestamptz,
    last_status    integer,
    given_up_at    timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (dispatch_id, attempt),
    CHECK (given_up_at IS NULL OR next_probe_at IS NULL)
);

-- The probe loop's two reads: due probes, and blocked dispatches not yet scheduled.
CREATE INDEX effectus_dispatch_probes_due ON effectus_dispatch_probes (next_probe_at)
    WHERE next_probe_at IS NOT NULL;
CREATE INDEX effectus_saga_outbox_blocked_unknown ON effectus_saga_outbox (verb, dispatch_id)
    WHERE state = 'blocked_unknown';

-- A new blocked state, blocked_destination (docs/design.md section 6): the destination answered
-- that nothing was committed for a reason of its own or of our configuration (answers = "http":
-- 401, 403, 404, 405, 413, 415) until the dispatch's retry budget was spent. A person fixes the
-- credential or the route and retries, or cancels (docs/operations.md section 2).
--
-- Each state check is widened: dropped and made again with the new state, NOT VALID and then
-- validated (a scan that every existing row passes: the old check held them). The stop reason
-- check gets a name (it had PostgreSQL's, effectus_saga_instances_check2), SQLite's. Each drop
-- names what it may find, so the file also runs on a schema it already changed.
ALTER TABLE effectus_saga_instances
    DROP CONSTRAINT effectus_saga_instances_state_check,
    DROP CONSTRAINT IF EXISTS effectus_saga_instances_check2,
    DROP CONSTRAINT IF EXISTS effectus_saga_instances_stop_reason,
    ADD CONSTRAINT effectus_saga_instances_state_check CHECK (state IN (
        'running', 'completed', 'compensating', 'compensated', 'failed',
        'blocked_unknown', 'blocked_fence', 'blocked_compensation', 'blocked_contract',
        'blocked_destination')) NOT VALID,
    -- every blocked or failed saga says why
    ADD CONSTRAINT effectus_saga_instances_stop_reason CHECK (
        state NOT IN ('failed', 'blocked_unknown', 'blocked_fence', 'blocked_compensation',
                      'blocked_contract', 'blocked_destination')
        OR stop_reason IS NOT NULL) NOT VALID;
ALTER TABLE effectus_saga_instances VALIDATE CONSTRAINT effectus_saga_instances_state_check;
ALTER TABLE effectus_saga_instances VALIDATE CONSTRAINT effectus_saga_instances_stop_reason;

ALTER TABLE effectus_saga_outbox
    DROP CONSTRAINT effectus_saga_outbox_state_check,
    ADD CONSTRAINT effectus_saga_outbox_state_check CHECK (state IN (
        'queued', 'in_flight', 'succeeded', 'retry_wait', 'failed_permanent',
        'blocked_unknown', 'blocked_fence', 'blocked_contract', 'blocked_destination',
        'canceled')) NOT VALID;
ALTER TABLE effectus_saga_outbox VALIDATE CONSTRAINT effectus_saga_outbox_state_check;

ALTER TABLE effectus_saga_attempts
    DROP CONSTRAINT effectus_saga_attempts_settled_to_check,
    ADD CONSTRAINT effectus_saga_attempts_settled_to_check CHECK (settled_to IN (
        'succeeded', 'retry_wait', 'failed_permanent', 'blocked_unknown', 'blocked_fence',
        'blocked_contract', 'blocked_destination', 'canceled')) NOT VALID;
ALTER TABLE effectus_saga_attempts VALIDATE CONSTRAINT effectus_saga_attempts_settled_to_check;

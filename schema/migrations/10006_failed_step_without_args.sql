-- A next step whose arguments cannot be resolved (a missing $result path, a schema or path
-- rule broken by an earlier result) fails with nothing sent: a failed step may have no
-- resolved arguments. 10001 refused that row, which wedged the recorder on it.
ALTER TABLE effectus_saga_steps DROP CONSTRAINT effectus_saga_steps_check1;
ALTER TABLE effectus_saga_steps
    ADD CONSTRAINT effectus_saga_steps_started
    CHECK (state IN ('pending', 'failed') OR args IS NOT NULL);

-- A submit writes no step rows: a step is read from its saga's pinned plan, its state from its
-- dispatches (docs/design.md section 10). A step row is written only for a state no dispatch
-- can say (a step that failed at enqueue, see keep_step_state.sql), and sagas submitted
-- before keep theirs. A dispatch's row therefore belongs to its saga: its foreign key names
-- the saga, and it still leaves only with it (prune deletes the saga; its steps, dispatches,
-- attempts and timeline go with it by ON DELETE CASCADE).
ALTER TABLE effectus_saga_outbox
    DROP CONSTRAINT effectus_saga_outbox_saga_id_effect_id_fkey,
    ADD CONSTRAINT effectus_saga_outbox_saga_id_fkey FOREIGN KEY (saga_id)
        REFERENCES effectus_saga_instances (saga_id) ON DELETE CASCADE;

-- Deleted with its saga (ON DELETE CASCADE, inside the referential-integrity trigger) is one
-- or more trigger levels deeper than a direct DELETE (see 10011).
CREATE OR REPLACE FUNCTION effectus_saga_outbox_no_direct_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF pg_trigger_depth() < 2 THEN
        RAISE EXCEPTION 'effectus_saga_outbox rows leave only with their saga';
    END IF;
    RETURN OLD;
END;
$$;

-- Parallel steps (issue 17, docs/design.md section 4 "Parallel steps"): steps are compensated
-- in the reverse of the order they succeeded, which with several branches in flight is not
-- their plan order. Each step records its place in that order when it succeeds (1, 2, ...
-- within its saga); NULL for a step that never succeeded and for every row written before.
ALTER TABLE effectus_saga_steps
    ADD COLUMN succeeded_order INTEGER CHECK (succeeded_order >= 1);

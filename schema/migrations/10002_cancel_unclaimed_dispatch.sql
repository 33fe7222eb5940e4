-- DESIGN section 6 allows queued -> canceled, also for a dispatch never claimed (attempt 0).
-- 10001 admitted attempt 0 only while queued, which forced a cancel to delete the row.
ALTER TABLE effectus_saga_outbox DROP CONSTRAINT effectus_saga_outbox_check2;
ALTER TABLE effectus_saga_outbox
    ADD CONSTRAINT effectus_saga_outbox_attempted
    CHECK (state IN ('queued', 'canceled') OR attempt >= 1);

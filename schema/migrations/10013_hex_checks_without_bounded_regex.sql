-- Every 64-hex-digit column was checked with `~ '^[0-9a-f]{64}$'`. PostgreSQL checks every
-- CHECK constraint of a row on each UPDATE, whichever columns change, and the bounded
-- repetition made that regular expression cost ~12 µs per evaluation on this project's
-- bench machine: about 14 of them per saga step (each move of an outbox, step or saga row),
-- 22% of the claim statement's server time. The same rule is checked here as
-- `length(x) = 64 AND x ~ '^[0-9a-f]+$'` (~1 µs; the same rows pass, the same rows fail with
-- the same check_violation and the same constraint name), as schema/sqlite already does with
-- GLOB. The constraints are swapped in place: added NOT VALID under their old names, then
-- validated (a scan of each table, which every existing row passes).
ALTER TABLE effectus_saga_instances
    DROP CONSTRAINT effectus_saga_instances_saga_id_check,
    DROP CONSTRAINT effectus_saga_instances_plan_digest_check,
    DROP CONSTRAINT effectus_saga_instances_facts_hash_check,
    ADD CONSTRAINT effectus_saga_instances_saga_id_check
        CHECK (length(saga_id) = 64 AND saga_id ~ '^[0-9a-f]+$') NOT VALID,
    ADD CONSTRAINT effectus_saga_instances_plan_digest_check
        CHECK (length(plan_digest) = 64 AND plan_digest ~ '^[0-9a-f]+$') NOT VALID,
    ADD CONSTRAINT effectus_saga_instances_facts_hash_check
        CHECK (length(facts_hash) = 64 AND facts_hash ~ '^[0-9a-f]+$') NOT VALID;

ALTER TABLE effectus_saga_steps
    DROP CONSTRAINT effectus_saga_steps_args_hash_check,
    DROP CONSTRAINT effectus_saga_steps_contract_hash_check,
    ADD CONSTRAINT effectus_saga_steps_args_hash_check
        CHECK (length(args_hash) = 64 AND args_hash ~ '^[0-9a-f]+$') NOT VALID,
    ADD CONSTRAINT effectus_saga_steps_contract_hash_check
        CHECK (length(contract_hash) = 64 AND contract_hash ~ '^[0-9a-f]+$') NOT VALID;

ALTER TABLE effectus_saga_outbox
    DROP CONSTRAINT effectus_saga_outbox_args_hash_check,
    DROP CONSTRAINT effectus_saga_outbox_contract_hash_check,
    DROP CONSTRAINT effectus_saga_outbox_idempotency_key_check,
    ADD CONSTRAINT effectus_saga_outbox_args_hash_check
        CHECK (length(args_hash) = 64 AND args_hash ~ '^[0-9a-f]+$') NOT VALID,
    ADD CONSTRAINT effectus_saga_outbox_contract_hash_check
        CHECK (length(contract_hash) = 64 AND contract_hash ~ '^[0-9a-f]+$') NOT VALID,
    ADD CONSTRAINT effectus_saga_outbox_idempotency_key_check
        CHECK (length(idempotency_key) = 64 AND idempotency_key ~ '^[0-9a-f]+$') NOT VALID;

ALTER TABLE effectus_saga_tombstones
    DROP CONSTRAINT effectus_saga_tombstones_saga_id_check,
    ADD CONSTRAINT effectus_saga_tombstones_saga_id_check
        CHECK (length(saga_id) = 64 AND saga_id ~ '^[0-9a-f]+$') NOT VALID;

ALTER TABLE effectus_saga_instances VALIDATE CONSTRAINT effectus_saga_instances_saga_id_check;
ALTER TABLE effectus_saga_instances VALIDATE CONSTRAINT effectus_saga_instances_plan_digest_check;
ALTER TABLE effectus_saga_instances VALIDATE CONSTRAINT effectus_saga_instances_facts_hash_check;
ALTER TABLE effectus_saga_steps VALIDATE CONSTRAINT effectus_saga_steps_args_hash_check;
ALTER TABLE effectus_saga_steps VALIDATE CONSTRAINT effectus_saga_steps_contract_hash_check;
ALTER TABLE effectus_saga_outbox VALIDATE CONSTRAINT effectus_saga_outbox_args_hash_check;
ALTER TABLE effectus_saga_outbox VALIDATE CONSTRAINT effectus_saga_outbox_contract_hash_check;
ALTER TABLE effectus_saga_outbox VALIDATE CONSTRAINT effectus_saga_outbox_idempotency_key_check;
ALTER TABLE effectus_saga_tombstones VALIDATE CONSTRAINT effectus_saga_tombstones_saga_id_check;

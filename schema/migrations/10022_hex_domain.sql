-- The 64-hex-digit rule (docs/design.md section 2) on the columns a step's rows rewrite is a
-- domain's, not each table's: PostgreSQL checks every CHECK of a table on each UPDATE of a
-- row, whichever columns change, and a domain's check only where a value is converted to it
-- (an INSERT, or an UPDATE that sets the column). An outbox row is written three times in a
-- step's life (enqueued, claimed, settled) and its three hashes never change after the first.
-- In a drain's profile of the database's backends (docs/performance.md, round seventeen) the
-- CHECK constraints took 11% of their CPU, 7% after this (the regular expressions 2.3% and
-- 0.9%: what is left of them is an insert's and the saga id's). The rule, the values it
-- accepts and refuses and the error's kind (check_violation) are the same; the constraint's
-- name is the domain's.
--
-- No table is rewritten: the domain has no constraint while the columns change to it (text to
-- a domain over text is binary coercible, so each table keeps its files and indexes), then it
-- gets its check NOT VALID and is validated (a scan of each column, which every existing row
-- passes: 10013's constraints held them). The outbox's trigger that keeps a timeline entry
-- names two of these columns, and a column a trigger names cannot change type: it is dropped
-- and made again as 10015 made it.
--
-- Left as table checks: the saga id of the sagas (a key three tables' foreign keys refer to:
-- changing its type would check each of them again) and of the tombstones (never rewritten).
CREATE DOMAIN effectus_hex64 AS text;

DROP TRIGGER effectus_saga_outbox_enqueue_kept ON effectus_saga_outbox;

ALTER TABLE effectus_saga_outbox
    DROP CONSTRAINT effectus_saga_outbox_args_hash_check,
    DROP CONSTRAINT effectus_saga_outbox_contract_hash_check,
    DROP CONSTRAINT effectus_saga_outbox_idempotency_key_check,
    ALTER COLUMN args_hash TYPE effectus_hex64,
    ALTER COLUMN contract_hash TYPE effectus_hex64,
    ALTER COLUMN idempotency_key TYPE effectus_hex64;

ALTER TABLE effectus_saga_instances
    DROP CONSTRAINT effectus_saga_instances_plan_digest_check,
    DROP CONSTRAINT effectus_saga_instances_facts_hash_check,
    ALTER COLUMN plan_digest TYPE effectus_hex64,
    ALTER COLUMN facts_hash TYPE effectus_hex64;

ALTER TABLE effectus_saga_steps
    DROP CONSTRAINT effectus_saga_steps_args_hash_check,
    DROP CONSTRAINT effectus_saga_steps_contract_hash_check,
    ALTER COLUMN args_hash TYPE effectus_hex64,
    ALTER COLUMN contract_hash TYPE effectus_hex64;

CREATE TRIGGER effectus_saga_outbox_enqueue_kept
    AFTER UPDATE OF saga_id, effect_id, direction, idempotency_key, args_hash, created_at,
        enqueued_by, started_from, enqueued_after
    ON effectus_saga_outbox
    FOR EACH ROW WHEN (OLD.enqueued_by IS NOT NULL)
    EXECUTE FUNCTION effectus_timeline_entry_kept();

ALTER DOMAIN effectus_hex64 ADD CONSTRAINT effectus_hex64_check
    CHECK (length(VALUE) = 64 AND VALUE ~ '^[0-9a-f]+$') NOT VALID;
ALTER DOMAIN effectus_hex64 VALIDATE CONSTRAINT effectus_hex64_check;

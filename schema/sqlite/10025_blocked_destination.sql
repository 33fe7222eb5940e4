-- The same version as PostgreSQL's 10025: the state checks of the sagas, the outbox and the
-- attempts admit blocked_destination (docs/design.md section 6).
--
-- SQLite changes a check only by rebuilding its table, or by editing the table's definition
-- where it is stored, the procedure SQLite documents for a change that leaves every stored
-- row valid (https://www.sqlite.org/lang_altertable.html, "making other kinds of table schema
-- changes"): a widened check is one. The edit adds the new state after 'blocked_contract'
-- wherever a state list of these three tables names it, and keeps every column whatever
-- migration added it (a rebuild would copy a fixed list of columns). Rewriting an index
-- afterwards moves the schema's version on, so that every open connection reads the edited
-- definitions again; writable_schema = RESET has this one read them already.
PRAGMA writable_schema = ON;
UPDATE sqlite_master
SET sql = replace(sql, '''blocked_contract''', '''blocked_contract'', ''blocked_destination''')
WHERE type = 'table'
  AND name IN ('effectus_saga_instances', 'effectus_saga_outbox', 'effectus_saga_attempts')
  AND instr(sql, '''blocked_destination''') = 0;
PRAGMA writable_schema = RESET;
DROP INDEX effectus_saga_instances_live;
CREATE INDEX effectus_saga_instances_live ON effectus_saga_instances (state, updated_at)
    WHERE state NOT IN ('completed', 'compensated', 'failed');

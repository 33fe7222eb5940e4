-- The DBOS peer's workflows that have ended, succeeded or failed (DBOS's system schema, "dbos").
SELECT count(*) FROM dbos.workflow_status WHERE status IN ('SUCCESS', 'ERROR')

-- The DBOS peer's workflows recorded as succeeded (DBOS's system schema, "dbos").
SELECT count(*) FROM dbos.workflow_status WHERE status = 'SUCCESS'

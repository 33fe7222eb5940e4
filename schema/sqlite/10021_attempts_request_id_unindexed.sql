-- The same version as PostgreSQL's 10021, which drops the unique index on an attempt's
-- request ID. On SQLite that index is part of the table (dropping it takes a table rebuild,
-- not worth it for one machine): nothing changes here.
SELECT 1;

-- The same version as PostgreSQL's 10019, which leaves more room on the outbox's and the
-- attempts' pages for their rewrites. SQLite has no fillfactor: nothing changes here.
SELECT 1;

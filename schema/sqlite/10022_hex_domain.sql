-- The same version as PostgreSQL's 10022, which moves the 64-hex-digit check of the columns a
-- step rewrites from each table to a domain, so that rewrites which leave them alone do not
-- check them again. SQLite has no domains, and its GLOB checks cost a fraction of
-- PostgreSQL's regular expressions: nothing changes here.
SELECT 1;

-- The same version as PostgreSQL's 10013, which checks its 64-hex-digit columns with length()
-- and an unbounded character class instead of `{64}` (a cost on every UPDATE there). SQLite's
-- columns have been checked with length() and GLOB since 10001: nothing changes here.
SELECT 1;

-- The same version as PostgreSQL's 10014, which puts the server's timeline into fencing tokens
-- so they stay monotonic across a failover to a standby. A SQLite file has no standby and no
-- timeline: its tokens are what they were.
SELECT 1;

-- The same version as PostgreSQL's 10023: every fencing grant is at least the clock, so a new
-- store or a restored backup grants above what an earlier store or the original granted
-- (docs/design.md section 8, "Across stores and backups"). A SQLite file has one timeline:
-- a grant is max(last token, base + ticks) + 1 (effectusd/sql/sqlite/store/acquire_fence.sql;
-- base: 0, or the timeline's base a counter carried from a server on a higher timeline
-- keeps), ticks being the 10 ms since 2026-01-01 00:00 UTC (Julian day 2461041.5; 8,640,000
-- ticks a day) by this host's clock, 0 before then: the same floor as PostgreSQL's timeline 1,
-- so a move from this file to PostgreSQL keeps tokens rising. 'now' is one instant for a
-- whole statement. Written to be applied again over itself.
DROP VIEW IF EXISTS effectus_fence_floor;

CREATE VIEW effectus_fence_floor (token_floor) AS
SELECT max(0, CAST((julianday('now') - 2461041.5) * 8640000 AS INTEGER));

-- How far each resource's last token is ahead of the clock, in ticks (as PostgreSQL's view).
DROP VIEW IF EXISTS effectus_fencing_leads;

CREATE VIEW effectus_fencing_leads (resource, ticks_ahead) AS
SELECT resource, (last_token - token_floor + 34359738368) % 68719476736 - 34359738368
FROM effectus_fencing_counters, effectus_fence_floor;

-- More room on the hot tables' pages for the rewrites a step makes (10010 left 30%). A row
-- rewritten onto its own page costs less WAL three ways: the record logs only the bytes that
-- changed between the old version and the new (PostgreSQL compares their common prefix and
-- suffix only when both are on one page); an attempt's settlement, which changes no indexed
-- column, stays a HOT update (no new index entries); and no lock record is written for the
-- old version, which a rewrite that moves to another page writes first. Measured on the
-- bench (docs/performance.md, round thirteen): outbox rewrites 316 -> 162 WAL bytes each,
-- attempt settlements HOT 31% -> all but a few, about a sixth less WAL per step. An attempt
-- row about doubles in size when it is settled, so its pages keep more room. The price is
-- space: pages are filled to 40% (30%) by inserts, the rest by rewrites (pruned and vacuumed
-- back). It applies to pages written from now on; existing pages are left as they are.
ALTER TABLE effectus_saga_outbox SET (fillfactor = 40);
ALTER TABLE effectus_saga_attempts SET (fillfactor = 30);

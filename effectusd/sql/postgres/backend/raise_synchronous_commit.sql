-- The daemon's guarded writes (write-aheads, fencing grants, outcomes) wait at least for a
-- synchronous standby to have written them, where there is one (effectusd/core/replication.py
-- says to what level). For the whole session: a claim that wrote nothing ahead still sets
-- "off" for its own transaction (claim_ready.sql).
SELECT set_config('synchronous_commit', %(level)s, false) AS synchronous_commit

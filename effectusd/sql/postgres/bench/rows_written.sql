-- Row versions this database's sessions have written: inserted, updated (HOT or not) and
-- deleted tuples, as the sessions have reported them so far (each reports on exit).
SELECT tup_inserted + tup_updated + tup_deleted FROM pg_stat_database WHERE datname = current_database()

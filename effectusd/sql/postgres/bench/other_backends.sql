-- Other sessions still connected to this database; each one flushes its statistics on exit.
SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()

SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()

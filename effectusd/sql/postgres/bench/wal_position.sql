SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint

-- What this connection's server says about replication (effectusd/core/replication.py): a
-- standby (in recovery), or a server whose transactions are read-only by default
-- (default_transaction_read_only, which transaction_read_only shows), is refused; the
-- timeline is read from the name of the WAL segment being written (a standby writes none);
-- WAL senders are counted whatever the role may see of them (their sync_state needs
-- pg_monitor, else it reads as NULL and no standby counts as synchronous, though the settings
-- still decide the mode).
SELECT pg_is_in_recovery() AS in_recovery,
       current_setting('transaction_read_only') = 'on' AS read_only,
       CASE WHEN NOT pg_is_in_recovery() THEN
           ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint
       END AS timeline,
       current_setting('synchronous_standby_names') AS synchronous_standby_names,
       current_setting('synchronous_commit') AS synchronous_commit,
       (SELECT count(*) FROM pg_stat_replication) AS standbys,
       (SELECT count(*) FROM pg_stat_replication
        WHERE sync_state IN ('sync', 'quorum')) AS synchronous_standbys

-- One migrator of the fencing authority at a time; released with the transaction.
SELECT pg_advisory_xact_lock(hashtext('effectusd/migrate-authority'))

-- One installer at a time per database; released with the transaction.
SELECT pg_advisory_xact_lock(hashtextextended('effectus_dest/install', 0))

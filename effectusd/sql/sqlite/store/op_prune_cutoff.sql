-- One cutoff for the whole prune, from the database clock.
SELECT ((julianday('now') - 2440587.5) * 86400.0) - :older_than_s AS "cutoff [timestamp_real]"

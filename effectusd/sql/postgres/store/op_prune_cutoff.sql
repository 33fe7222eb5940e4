-- One cutoff for the whole prune, from the database clock.
SELECT now() - make_interval(secs => %(older_than_s)s::float8) AS cutoff

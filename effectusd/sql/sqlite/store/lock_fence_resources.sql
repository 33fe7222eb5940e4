-- PostgreSQL locks a write-ahead's resources in one global order here. A SQLite write
-- transaction holds the database's one write lock from its start (BEGIN IMMEDIATE), so two
-- acquisitions never interleave: there is nothing to order, and this statement changes nothing.
SELECT count(*) AS locked FROM json_each(:resources)

-- Does nothing, on purpose. SQLite has no LISTEN/NOTIFY: no other process can be woken from
-- inside a transaction, so daemons on SQLite poll the outbox instead. The statement still names
-- its parameter, so a caller passes what it passes to PostgreSQL, and it returns no rows.
SELECT :destination AS destination WHERE 0

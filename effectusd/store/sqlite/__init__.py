"""The SQLite store: the embedded default for one machine (PostgreSQL is the production store).
Its statements are effectusd/sql/sqlite/store/NAME.sql (effectusd.store.sql); the driver side
is effectusd.backends.sqlite.

Conventions every statement in ``sql/sqlite/`` and ``schema/sqlite`` follows (see
effectusd/backends/sqlite/connection.py):
timestamps are REAL Unix seconds (declared ``TIMESTAMP_REAL``), JSON is text (``JSON_TEXT``),
booleans are 0/1 (``BOOLEAN``); a computed column names its type, ``AS "x [timestamp_real]"``,
so it reads back as the same Python type the PostgreSQL store returns. A list parameter
arrives as JSON text and is read with ``json_each``.
"""

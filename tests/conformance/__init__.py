"""The store conformance suite: every store (PostgreSQL, SQLite) must pass the same tests."""

CREATE TABLE IF NOT EXISTS effectus_dest_migrations (
    version     INTEGER PRIMARY KEY,
    name        TEXT NOT NULL,
    checksum    TEXT NOT NULL,
    applied_at  REAL NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0)
) STRICT

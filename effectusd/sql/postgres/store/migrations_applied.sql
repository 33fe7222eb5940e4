SELECT version, name, checksum FROM effectus_schema_migrations ORDER BY version

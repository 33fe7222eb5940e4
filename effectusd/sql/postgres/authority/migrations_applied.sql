SELECT version, name, checksum FROM effectus_authority_migrations ORDER BY version

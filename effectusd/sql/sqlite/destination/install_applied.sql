SELECT version, name, checksum FROM effectus_dest_migrations ORDER BY version

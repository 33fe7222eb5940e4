INSERT INTO effectus_schema_migrations (version, name, checksum)
VALUES (%(version)s, %(name)s, %(checksum)s)

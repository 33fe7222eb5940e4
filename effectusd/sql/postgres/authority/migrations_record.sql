INSERT INTO effectus_authority_migrations (version, name, checksum)
VALUES (%(version)s, %(name)s, %(checksum)s)

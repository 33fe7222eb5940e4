INSERT INTO effectus_dest_migrations (version, name, checksum)
VALUES (%(version)s, %(name)s, %(checksum)s)

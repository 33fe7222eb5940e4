INSERT INTO effectus_dest_migrations (version, name, checksum)
VALUES (:version, :name, :checksum)

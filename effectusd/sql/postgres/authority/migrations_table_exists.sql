SELECT to_regclass('effectus_authority_migrations') IS NOT NULL AS present

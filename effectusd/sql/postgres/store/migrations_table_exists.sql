SELECT to_regclass('effectus_schema_migrations') IS NOT NULL AS present

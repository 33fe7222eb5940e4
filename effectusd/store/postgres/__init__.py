"""The PostgreSQL store: the production store. Every statement lives in
effectusd/sql/postgres/store/NAME.sql (effectusd.store.sql)."""

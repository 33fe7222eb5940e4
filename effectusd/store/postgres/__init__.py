"""The PostgreSQL store: the production store. Every statement lives in queries/NAME.sql."""

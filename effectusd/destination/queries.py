"""Named SQL: ``sql("select_key")`` is the text of effectusd/sql/postgres/destination/select_key.sql
and ``sqlite_sql("select_key")`` that of effectusd/sql/sqlite/destination/select_key.sql, so
every statement the kit runs can be found with grep, and both dialects answer to the same step
names."""

from __future__ import annotations

from effectusd.backends.postgres.runner import SQL
from effectusd.backends.postgres.runner import sql as postgres_sql
from effectusd.backends.statements import Statements

OWNER = "the destination kit"
POSTGRES = Statements("effectusd", "sql/postgres/destination", owner=OWNER)
SQLITE = Statements("effectusd", "sql/sqlite/destination", owner=OWNER)


def sql(name: str) -> SQL:
    return postgres_sql(POSTGRES, name)


def sqlite_sql(name: str) -> str:
    return SQLITE.text(name)

"""Named SQL: ``sql("select_key")`` is the text of sql/select_key.sql, so every statement the
kit runs can be found with grep."""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from psycopg import sql as psql


@cache
def sql(name: str) -> psql.SQL:
    text = (files(__package__) / "sql" / f"{name}.sql").read_text("utf-8")
    return psql.SQL(text.strip().rstrip(";"))

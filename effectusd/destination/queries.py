"""Named SQL: ``sql("select_key")`` is the text of sql/select_key.sql (PostgreSQL) and
``sqlite_sql("select_key")`` that of sql/sqlite/select_key.sql, so every statement the kit
runs can be found with grep, and both dialects answer to the same step names."""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from psycopg import sql as psql


def _text(*parts: str) -> str:
    path = files(__package__) / "sql"
    for folder in parts[:-1]:
        path = path / folder
    path = path / f"{parts[-1]}.sql"
    if not path.is_file():
        raise LookupError(f"the destination kit has no statement {'/'.join(parts)}.sql")
    return path.read_text("utf-8").strip().rstrip(";")


@cache
def sql(name: str) -> psql.SQL:
    return psql.SQL(_text(name))


@cache
def sqlite_sql(name: str) -> str:
    return _text("sqlite", name)

"""Named SQL: `sql("claim_ready")` is the text of queries/claim_ready.sql."""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from psycopg import sql as psql


@cache
def sql(name: str) -> psql.SQL:
    text = (files("effectusd.store.postgres") / "queries" / f"{name}.sql").read_text("utf-8")
    return psql.SQL(text.strip().rstrip(";"))


def query_names() -> list[str]:
    folder = files("effectusd.store.postgres") / "queries"
    return sorted(item.name[:-4] for item in folder.iterdir() if item.name.endswith(".sql"))

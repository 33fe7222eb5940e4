"""Named SQL: `sql("claim_ready")` is the text of queries/claim_ready.sql.

``package`` names whose queries/ folder to read: the bench keeps its statements in its own."""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from psycopg import sql as psql

PACKAGE = "effectusd.store.postgres"


@cache
def sql(name: str, package: str = PACKAGE) -> psql.SQL:
    text = (files(package) / "queries" / f"{name}.sql").read_text("utf-8")
    return psql.SQL(text.strip().rstrip(";"))


def query_names(package: str = PACKAGE) -> list[str]:
    folder = files(package) / "queries"
    return sorted(item.name[:-4] for item in folder.iterdir() if item.name.endswith(".sql"))

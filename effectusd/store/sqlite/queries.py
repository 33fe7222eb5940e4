"""Named SQL for SQLite: `sql("claim_mark")` is the text of queries/claim_mark.sql."""

from __future__ import annotations

from functools import cache
from importlib.resources import files


@cache
def sql(name: str) -> str:
    text = (files("effectusd.store.sqlite") / "queries" / f"{name}.sql").read_text("utf-8")
    return text.strip().rstrip(";")


def query_names() -> list[str]:
    folder = files("effectusd.store.sqlite") / "queries"
    return sorted(item.name[:-4] for item in folder.iterdir() if item.name.endswith(".sql"))

"""The bench's own PostgreSQL: scratch databases, its statements (sql/postgres/bench/NAME.sql,
kept out of the store's production folder) and the readings taken with them."""

from __future__ import annotations

import os
import time
import uuid

from effectusd.backends.postgres import connect, database_name, with_database
from effectusd.backends.postgres.runner import SQL
from effectusd.backends.postgres.runner import sql as named_sql
from effectusd.backends.statements import Statements

BENCH_STATEMENTS = Statements("effectusd", "sql/postgres/bench", owner="effectusd bench")


def sql(name: str) -> SQL:
    return named_sql(BENCH_STATEMENTS, name)


def scratch_database(server_url: str) -> str:
    name = f"effectusd_bench_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with connect(server_url) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return with_database(server_url, name)


def drop_database(server_url: str, url: str) -> None:
    name = database_name(url)
    with connect(server_url) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def read_latencies(url: str, query: str = "latencies") -> list[float]:
    with connect(url) as conn:
        return [float(row[0]) for row in conn.execute(sql(query)).fetchall()]


def scalar(url: str, query: str) -> int:
    with connect(url) as conn:
        row = conn.execute(sql(query)).fetchone()
    assert row is not None
    return int(row[0])


def settled_scalar(url: str, query: str, patience_s: float = 10.0) -> int:
    """A pg_stat_database reading once the other sessions of the database have gone: a
    backend reports its counts at most once a second while it lives, and always on exit."""
    give_up = time.monotonic() + patience_s
    while scalar(url, "other_backends") and time.monotonic() < give_up:
        time.sleep(0.05)
    return scalar(url, query)

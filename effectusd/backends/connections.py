"""Connection kinds: what a backend accepts as the caller's connection or pool, and the error
that names the mistake when it gets the other database's (or a sync one where async is needed)."""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from effectusd.core.database_url import Dialect
from effectusd.core.errors import WrongConnection

# The caller's own connections, as the public APIs name them.
PostgresConnection = psycopg.Connection[Any]
AsyncPostgresConnection = psycopg.AsyncConnection[Any]
SqliteConnection = sqlite3.Connection
Connection = PostgresConnection | SqliteConnection
# The caller's own pools (PostgreSQL only): the client borrows a connection per operation.
PostgresPool = ConnectionPool[Any]
AsyncPostgresPool = AsyncConnectionPool[Any]
PostgresCursor = psycopg.Cursor[Any]
AsyncPostgresCursor = psycopg.AsyncCursor[Any]

_KINDS: dict[Dialect, tuple[str, type[object], str]] = {
    "postgresql": ("PostgreSQL", psycopg.Connection, "psycopg.Connection"),
    "sqlite": ("SQLite", sqlite3.Connection, "sqlite3.Connection"),
}


def require_connection(dialect: Dialect, conn: object, who: str = "Client") -> None:
    """Refuse a connection of the other store than the configured one, or of the wrong kind."""
    store, kind, wanted = _KINDS[dialect]
    if isinstance(conn, kind):
        return
    hint = (
        "; AsyncClient takes a psycopg.AsyncConnection"
        if isinstance(conn, psycopg.AsyncConnection)
        else ""
    )
    raise WrongConnection(
        f"{who} is configured for the {store} store (database URL) and joins a {wanted}'s "
        f"transaction, not a {type(conn).__module__}.{type(conn).__name__}{hint}"
    )


def require_async_connection(dialect: Dialect, conn: object) -> None:
    """AsyncClient joins only a psycopg.AsyncConnection, and only on PostgreSQL."""
    if not isinstance(conn, psycopg.AsyncConnection):
        raise WrongConnection(
            f"AsyncClient joins a psycopg.AsyncConnection's transaction, not a "
            f"{type(conn).__name__}; on SQLite pass your sqlite3 connection to Client instead"
        )
    if dialect != "postgresql":
        raise WrongConnection(
            "AsyncClient is configured for the SQLite store (database URL) and cannot join a "
            "PostgreSQL transaction; check the database URL it was given"
        )


def pool_url(pool: object) -> str | None:
    """The URL (or conninfo) a psycopg pool connects with; None for anything else."""
    if isinstance(pool, ConnectionPool | AsyncConnectionPool):
        return str(pool.conninfo)
    return None


def require_pool(dialect: Dialect, pool: object, *, asynchronous: bool) -> None:
    """Pools are PostgreSQL's: a psycopg_pool.ConnectionPool for Client, an
    AsyncConnectionPool for AsyncClient."""
    kind = AsyncConnectionPool if asynchronous else ConnectionPool
    if dialect == "postgresql" and isinstance(pool, kind):
        return
    who = "AsyncClient" if asynchronous else "Client"
    store = "PostgreSQL" if dialect == "postgresql" else "SQLite"
    raise WrongConnection(
        f"{who} on the {store} store takes a psycopg_pool.{kind.__name__}, not a "
        f"{type(pool).__module__}.{type(pool).__name__}"
        + ("" if dialect == "postgresql" else " (SQLite has no pools: give a connection or a URL)")
    )

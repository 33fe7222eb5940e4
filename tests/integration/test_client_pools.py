"""Clients on the application's own connections: a psycopg pool (sync and async) or one
connection. A pooled client borrows a pool connection per operation and opens none itself; the
pool's URL is the database URL; a pool or connection of the wrong kind is refused up front."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from effectusd import AsyncClient, Client, SagaState, WrongConnection
from tests.support.harness import make_config, serial_plan

pytestmark = pytest.mark.postgres

CONFIG = make_config("http://127.0.0.1:9", {"pay": {}})  # its database URL is SQLite's default
PLAN = serial_plan("checkout", ["pay"])


def refuse_new_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the client opened a connection of its own")

    monkeypatch.setattr(psycopg.Connection, "connect", refuse)
    monkeypatch.setattr(psycopg.AsyncConnection, "connect", refuse)


async def test_an_async_client_on_a_pool_opens_no_connection_of_its_own(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with AsyncConnectionPool(db, min_size=1, max_size=2, open=False) as pool:
        await pool.open(wait=True)
        client = AsyncClient(CONFIG, pool=pool)  # the database URL is the pool's
        assert client.backend.dialect == "postgresql"
        refuse_new_connections(monkeypatch)
        before = pool.get_stats().get("requests_num", 0)

        result = await client.submit(PLAN, execution_id="order-1")
        for _ in range(5):
            view = await client.get(result.saga_id)
            assert view is not None and view.state is SagaState.RUNNING
        assert [row.saga_id for row in await client.list()] == [result.saga_id]

        assert pool.get_stats()["requests_num"] - before == 7  # one borrow per operation


async def test_a_submit_joins_a_pooled_connections_transaction(db: str) -> None:
    async with AsyncConnectionPool(db, min_size=1, max_size=2, open=False) as pool:
        await pool.open(wait=True)
        client = AsyncClient(CONFIG, pool=pool)
        async with pool.connection() as conn:
            await client.submit(PLAN, execution_id="order-1", conn=conn)
            await conn.rollback()
        assert await client.list() == []
        async with pool.connection() as conn:
            kept = await client.submit(PLAN, execution_id="order-2", conn=conn)
        assert await client.get(kept.saga_id) is not None  # the pool committed on return


def test_a_sync_client_on_a_pool_or_a_connection(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with ConnectionPool(db, min_size=1, max_size=2, open=True) as pool, psycopg.connect(db) as conn:
        pool.wait()
        refuse_new_connections(monkeypatch)
        on_pool = Client(CONFIG, pool=pool)
        saga = on_pool.submit(PLAN, execution_id="order-1").saga_id
        on_connection = Client(CONFIG, database_url=db, connection=conn)
        view = on_connection.get(saga)
        assert view is not None and view.saga_id == saga
        second = on_connection.submit(PLAN, execution_id="order-2").saga_id
        assert on_pool.get(second) is None  # joined the connection's transaction: not yet
        conn.commit()
        assert on_pool.get(second) is not None


async def test_a_pool_or_connection_of_the_wrong_kind_is_refused(db: str, tmp_path: Path) -> None:
    lite = f"sqlite:///{tmp_path / 'x.db'}"
    async with AsyncConnectionPool(db, min_size=1, max_size=1, open=False) as async_pool:
        with pytest.raises(WrongConnection, match=r"takes a psycopg_pool\.ConnectionPool"):
            Client(CONFIG, pool=async_pool)  # type: ignore[arg-type]
        with pytest.raises(WrongConnection, match="SQLite has no pools"):
            AsyncClient(CONFIG, database_url=lite, pool=async_pool)
        async with await psycopg.AsyncConnection.connect(db) as conn:
            with pytest.raises(WrongConnection, match="not both"):
                AsyncClient(CONFIG, database_url=db, connection=conn, pool=async_pool)
            with pytest.raises(WrongConnection, match="AsyncClient takes"):
                Client(CONFIG, database_url=db, connection=conn)  # type: ignore[arg-type]
    with sqlite3.connect(":memory:") as lite_conn:
        with pytest.raises(WrongConnection, match=r"PostgreSQL store .* sqlite3\.Connection"):
            Client(CONFIG, database_url=db, connection=lite_conn)

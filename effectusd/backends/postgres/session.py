"""Long-lived PostgreSQL use by the daemon: a connection pool that runs operations, and a
LISTEN connection that says when something may be due; and the client's LISTEN for a saga's
state changes (``Client.wait``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool

from effectusd.backends.operation import Operation, one_statement
from effectusd.backends.postgres.driver_logs import quiet_driver_logs
from effectusd.backends.postgres.replication import ReplicationWatch
from effectusd.backends.postgres.runner import loads_document, run_async, sql
from effectusd.backends.statements import Statements

T = TypeVar("T")


class PoolSession:
    """Operations on a pool of autocommit connections: writes in a transaction each, reads
    and single statements without BEGIN/COMMIT round trips."""

    def __init__(self, pool: AsyncConnectionPool[Any], statements: Statements) -> None:
        self.pool = pool
        self.statements = statements

    @classmethod
    async def open(
        cls,
        conninfo: str,
        statements: Statements,
        min_size: int,
        max_size: int,
        replication: ReplicationWatch | None = None,
    ) -> PoolSession:
        """``replication``: every new connection (at start, and each one the pool opens again
        after a failover) reads its server into it first, and is dropped if it refuses it."""

        async def configure(conn: psycopg.AsyncConnection[Any]) -> None:
            if replication is not None:
                await replication.connected(conn)
            await _configure(conn)

        quiet_driver_logs()
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            conninfo,
            min_size=min_size,
            max_size=max_size,
            open=False,
            kwargs={"autocommit": True},
            configure=configure,
        )
        try:
            await pool.open(wait=True, timeout=open_bound(conninfo))
        except BaseException:  # PoolTimeout, or cancelled: a pool left open holds the process
            await pool.close()
            raise
        return cls(pool, statements)

    async def write(self, operation: Operation[T]) -> T:
        async with self.pool.connection() as conn:
            return await run_async(conn, operation, self.statements)

    async def write_single(self, operation: Operation[T]) -> T:
        async with self.pool.connection() as conn:
            return await run_async(
                conn, one_statement(operation), self.statements, transaction=False
            )

    async def read(self, operation: Operation[T]) -> T:
        """Reads are single statements on an autocommit connection: no BEGIN/COMMIT."""
        async with self.pool.connection() as conn:
            return await run_async(conn, operation, self.statements, transaction=False)

    async def close(self) -> None:
        await self.pool.close()


async def _configure(conn: psycopg.AsyncConnection[Any]) -> None:
    """Each pooled connection: generic plans, and json/jsonb read by ``loads_document``.

    The daemon's statements are planned once per connection, not once per call: psycopg
    prepares a statement from its fifth call, and PostgreSQL still planned each call of the
    claim, the write-ahead and the recorder's reads anew for its parameters (a custom plan,
    which it keeps choosing while it guesses that pays): 0.5 to 0.75 ms on each claim and
    write-ahead, on an idle daemon's path from enqueue to call, and a few percent of the
    server's time per step under load. Every statement of the hot path finds its rows by key
    or through its partial index whatever the parameters' values (pinned over a large
    backlog, with statistics and without: tests/integration/test_claim_plans.py)."""
    set_json_loads(loads_document, conn)
    await conn.execute("SET plan_cache_mode = force_generic_plan")


async def notifications(
    conninfo: str, statements: Statements, listen: str
) -> AsyncGenerator[None, None]:
    """One item once LISTEN is in place (notifications may have been missed before), then one
    per NOTIFY, until the connection is lost. A connection that cannot be opened raises."""
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        await conn.execute(sql(statements, listen))
        yield None
        async for _ in conn.notifies():
            yield None


# After a lost LISTEN connection, how long a wait pauses before the caller reads again (the
# server may be failing over: every host refusing for a moment).
RELISTEN_PAUSE_S = 0.2
_LOST = (psycopg.OperationalError, psycopg.InterfaceError, OSError)


class SagaListener:
    """``LISTEN effectus_saga`` on a connection of its own: update_saga_state notifies the
    saga's id at commit, so a wait wakes when the state it reads next has changed. A connection
    lost (a restart, a failover) is opened again, to whichever host takes writes; meanwhile a
    wait returns early, and the caller reads again (notifications may have been missed)."""

    def __init__(self, conninfo: str, statements: Statements) -> None:
        self.conninfo, self.statements = conninfo, statements
        self.conn: psycopg.Connection[Any] | None = None

    def listen(self) -> bool:
        """Listening now (True), or the server cannot be reached yet (False)."""
        if self.conn is not None and not self.conn.closed:
            return True
        try:
            self.conn = psycopg.connect(self.conninfo, autocommit=True)
            self.conn.execute(sql(self.statements, "listen_saga"))
        except _LOST:
            self.close()
            return False
        return True

    def wait(self, saga_id: str, timeout: float) -> None:
        if self.conn is None:  # lost earlier: back to listening, then read again at once
            if not self.listen():
                time.sleep(min(max(0.0, timeout), RELISTEN_PAUSE_S))
            return
        # Notifications that arrived since LISTEN, while the caller read, are queued on this
        # connection and come out first: none is missed between a read and this wait.
        try:
            for notice in self.conn.notifies(timeout=max(0.0, timeout)):
                if notice.payload == saga_id:
                    return
        except _LOST:
            self.close()

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class AsyncSagaListener:
    def __init__(self, conninfo: str, statements: Statements) -> None:
        self.conninfo, self.statements = conninfo, statements
        self.conn: psycopg.AsyncConnection[Any] | None = None

    async def listen(self) -> bool:
        if self.conn is not None and not self.conn.closed:
            return True
        try:
            self.conn = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True)
            await self.conn.execute(sql(self.statements, "listen_saga"))
        except _LOST:
            await self.close()
            return False
        return True

    async def wait(self, saga_id: str, timeout: float) -> None:
        if self.conn is None:
            if not await self.listen():
                await asyncio.sleep(min(max(0.0, timeout), RELISTEN_PAUSE_S))
            return
        try:
            async for notice in self.conn.notifies(timeout=max(0.0, timeout)):
                if notice.payload == saga_id:
                    return
        except _LOST:
            await self.close()

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()
            self.conn = None


@contextmanager
def saga_listener(conninfo: str, statements: Statements) -> Iterator[SagaListener]:
    listener = SagaListener(conninfo, statements)
    listener.listen()  # before the caller's first read; if the server is away, at the next wait
    try:
        yield listener
    finally:
        listener.close()


@asynccontextmanager
async def async_saga_listener(
    conninfo: str, statements: Statements
) -> AsyncIterator[AsyncSagaListener]:
    listener = AsyncSagaListener(conninfo, statements)
    await listener.listen()
    try:
        yield listener
    finally:
        await listener.close()


# How long opening the pool may wait past the URL's connect_timeout (psycopg_pool's own default,
# 30 s, where the URL sets none): a server that took the start-up check but refuses the pool's
# connections ends the start as a PoolTimeout in that bound, never later.
POOL_OPEN_SLACK_S = 5.0
POOL_OPEN_DEFAULT_S = 30.0


def open_bound(conninfo: str) -> float:
    """How long opening a pool on ``conninfo`` may take, in seconds."""
    try:
        timeout = float(psycopg.conninfo.conninfo_to_dict(conninfo).get("connect_timeout") or 0)
        # 0 (or none) is libpq's "wait forever": then the pool's own default bounds it
        return timeout + POOL_OPEN_SLACK_S if timeout > 0 else POOL_OPEN_DEFAULT_S
    except (ValueError, psycopg.Error):  # parsed where it was read: only a test gets here
        return POOL_OPEN_DEFAULT_S

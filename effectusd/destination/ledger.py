"""Run a business mutation under the destination contract on PostgreSQL, in one transaction
with it. What is decided, and why, is in exchange.py; ``handle`` and ``handle_sync`` only carry
its steps to an async or a sync psycopg connection (sqlite.py does the same for SQLite);
the driver is used only through effectusd.backends.

A serialization failure or a deadlock ends the transaction before anything of it committed, so
both answer 503 retryable_failure_known_not_committed, like a ``RetryableFailure``. So does a
connection that fails before or at BEGIN (e.g. a pooled connection whose server restarted):
no transaction began, so nothing can have committed. A failure after BEGIN, COMMIT included,
is ambiguous and propagates (the server answers 500: unknown).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime, timedelta
from typing import Any

from effectusd.backends.connections import (
    AsyncPostgresConnection,
    AsyncPostgresCursor,
    PostgresConnection,
    PostgresCursor,
)
from effectusd.backends.operation import drive_async
from effectusd.backends.postgres.runner import connection_state
from effectusd.destination.exchange import (
    DEFAULT_CLOCK_SKEW,
    DEFAULT_RETENTION,
    Clock,
    Exchange,
    Query,
    Refused,
    Step,
    wall_clock,
)
from effectusd.destination.probe import probe_steps
from effectusd.destination.protocol import EffectusRequest
from effectusd.destination.queries import sql
from effectusd.destination.replies import PermanentFailure, Reply

AsyncMutation = Callable[[AsyncPostgresConnection, EffectusRequest], Awaitable[Any]]
SyncMutation = Callable[[PostgresConnection, EffectusRequest], Any]

__all__ = [
    "DEFAULT_RETENTION",
    "AsyncMutation",
    "SyncMutation",
    "handle",
    "handle_sync",
    "probe",
    "prune_ledger",
    "prune_ledger_sync",
]


def _usable(conn: PostgresConnection | AsyncPostgresConnection) -> bool:
    """False for a connection already known broken; raise for one inside a transaction."""
    state = connection_state(conn)
    if state == "in_transaction":
        # The reply promises "committed"; only a transaction we begin and end can keep that.
        raise ValueError("handle() owns the transaction: pass a connection outside one")
    return state == "idle"


async def handle(
    conn: AsyncPostgresConnection,
    request: EffectusRequest,
    mutation: AsyncMutation,
    *,
    retention: timedelta = DEFAULT_RETENTION,
    clock_skew: timedelta = DEFAULT_CLOCK_SKEW,
    clock: Clock = wall_clock,
) -> Reply:
    """Answer ``request``, running ``mutation(conn, request)`` at most once per key.

    The mutation writes through ``conn`` only (its writes commit with the ledger row) and
    returns a JSON value, the 200 body; or raises PermanentFailure / RetryableFailure.
    ``retention``: how long stored answers are kept; ``clock_skew``: the deadline's allowance
    (both in exchange.py); ``clock``: this service's time, as an aware datetime.
    """
    exchange = Exchange(request, retention, clock_skew, clock)
    if not _usable(conn):
        return exchange.not_begun()

    async def perform(cur: AsyncPostgresCursor, step: Step) -> Any:
        if isinstance(step, Query):
            await cur.execute(sql(step.name), step.params)
            return await cur.fetchone() if cur.description else None
        try:
            async with conn.transaction():  # savepoint: a refusal keeps no writes
                return await mutation(conn, request)
        except PermanentFailure as failure:
            return Refused(failure)

    return await exchange.carry_out(_transaction(conn), perform)


def handle_sync(
    conn: PostgresConnection,
    request: EffectusRequest,
    mutation: SyncMutation,
    *,
    retention: timedelta = DEFAULT_RETENTION,
    clock_skew: timedelta = DEFAULT_CLOCK_SKEW,
    clock: Clock = wall_clock,
) -> Reply:
    """``handle`` for a synchronous connection and mutation."""
    exchange = Exchange(request, retention, clock_skew, clock)
    if not _usable(conn):
        return exchange.not_begun()

    def perform(cur: PostgresCursor, step: Step) -> Any:
        if isinstance(step, Query):
            cur.execute(sql(step.name), step.params)
            return cur.fetchone() if cur.description else None
        try:
            with conn.transaction():  # savepoint: a refusal keeps no writes
                return mutation(conn, request)
        except PermanentFailure as failure:
            return Refused(failure)

    return exchange.carry_out_blocking(_transaction_sync(conn), perform)


@asynccontextmanager
async def _transaction(conn: AsyncPostgresConnection) -> AsyncIterator[AsyncPostgresCursor]:
    async with conn.transaction(), conn.cursor() as cur:
        yield cur


@contextmanager
def _transaction_sync(conn: PostgresConnection) -> Iterator[PostgresCursor]:
    with conn.transaction(), conn.cursor() as cur:
        yield cur


async def probe(conn: AsyncPostgresConnection, key: str) -> Reply:
    """What the ledger knows of ``key`` (probe.py). Each statement commits on its own, so the
    ledger is read after the lock check whatever isolation level the connection defaults to."""
    steps = probe_steps(key)

    async def perform(step: Query) -> Any:
        async with conn.transaction(), conn.cursor() as cur:
            await cur.execute(sql(step.name), step.params)
            return await cur.fetchone()

    try:
        return await drive_async(steps, perform)
    finally:
        steps.close()


async def prune_ledger(
    conn: AsyncPostgresConnection, *, before: datetime | None = None, batch: int = 1000
) -> int:
    """Delete ledger rows that expired by ``before`` (default: now); returns how many.

    Run it from a scheduler. Pruning a key while its dispatch may still be retried would let
    the retry run the mutation again: keep ``retention`` above every caller's retry budget.
    """
    pruned = 0
    while True:
        async with conn.transaction():
            cur = await conn.execute(sql("prune_keys"), {"before": before, "batch": batch})
        pruned += cur.rowcount
        if cur.rowcount < batch:
            return pruned


def prune_ledger_sync(
    conn: PostgresConnection, *, before: datetime | None = None, batch: int = 1000
) -> int:
    """``prune_ledger`` for a synchronous connection."""
    pruned = 0
    while True:
        with conn.transaction():
            cur = conn.execute(sql("prune_keys"), {"before": before, "batch": batch})
        pruned += cur.rowcount
        if cur.rowcount < batch:
            return pruned

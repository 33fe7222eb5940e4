"""Run a business mutation under the destination contract on PostgreSQL, in one transaction
with it. What is decided, and why, is in exchange.py; ``handle`` and ``handle_sync`` only carry
its steps to an async or a sync psycopg connection (sqlite.py does the same for SQLite).

A serialization failure or a deadlock ends the transaction before anything of it committed, so
both answer 503 retryable_failure_known_not_committed, like a ``RetryableFailure``. So does a
connection that fails before or at BEGIN (e.g. a pooled connection whose server restarted):
no transaction began, so nothing can have committed. A failure after BEGIN, COMMIT included,
is ambiguous and propagates (the server answers 500: unknown).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg import errors, pq

from effectusd.destination.exchange import (
    DEFAULT_RETENTION,
    Abandon,
    Exchange,
    Query,
    Refused,
)
from effectusd.destination.protocol import EffectusRequest
from effectusd.destination.queries import sql
from effectusd.destination.replies import PermanentFailure, Reply, RetryableFailure

AsyncMutation = Callable[[psycopg.AsyncConnection[Any], EffectusRequest], Awaitable[Any]]
SyncMutation = Callable[[psycopg.Connection[Any], EffectusRequest], Any]
# Both end the transaction before anything of it committed, so retrying is safe.
_CONFLICTS = (errors.SerializationFailure, errors.DeadlockDetected)

__all__ = [
    "DEFAULT_RETENTION",
    "AsyncMutation",
    "SyncMutation",
    "handle",
    "handle_sync",
    "prune_ledger",
    "prune_ledger_sync",
]


def _usable(status: pq.TransactionStatus) -> bool:
    """False for a connection already known broken; raise for one inside a transaction."""
    if status == pq.TransactionStatus.UNKNOWN:
        return False
    if status != pq.TransactionStatus.IDLE:
        # The reply promises "committed"; only a transaction we begin and end can keep that.
        raise ValueError("handle() owns the transaction: pass a connection outside one")
    return True


async def handle(
    conn: psycopg.AsyncConnection[Any],
    request: EffectusRequest,
    mutation: AsyncMutation,
    *,
    retention: timedelta = DEFAULT_RETENTION,
) -> Reply:
    """Answer ``request``, running ``mutation(conn, request)`` at most once per key.

    The mutation writes through ``conn`` only (its writes commit with the ledger row) and
    returns a JSON value, the 200 body; or raises PermanentFailure / RetryableFailure.
    """
    exchange = Exchange(request, retention)
    if not _usable(conn.info.transaction_status):
        return exchange.not_begun()
    steps = exchange.steps()
    began = False
    try:
        async with conn.transaction(), conn.cursor() as cur:
            began = True
            answer: Any = None
            while True:
                try:
                    step = steps.send(answer)
                except StopIteration as done:
                    reply: Reply = done.value
                    break
                if isinstance(step, Query):
                    await cur.execute(sql(step.name), step.params)
                    answer = await cur.fetchone() if cur.description else None
                else:
                    try:
                        async with conn.transaction():  # savepoint: a refusal keeps no writes
                            answer = await mutation(conn, request)
                    except PermanentFailure as failure:
                        answer = Refused(failure)
        return reply  # committed
    except (Abandon, RetryableFailure, *_CONFLICTS) as exc:
        return exchange.rolled_back(exc)
    except psycopg.OperationalError:
        if began:
            raise  # COMMIT (or a statement) failed: it may have committed
        return exchange.not_begun()
    finally:
        steps.close()


def handle_sync(
    conn: psycopg.Connection[Any],
    request: EffectusRequest,
    mutation: SyncMutation,
    *,
    retention: timedelta = DEFAULT_RETENTION,
) -> Reply:
    """``handle`` for a synchronous connection and mutation."""
    exchange = Exchange(request, retention)
    if not _usable(conn.info.transaction_status):
        return exchange.not_begun()
    steps = exchange.steps()
    began = False
    try:
        with conn.transaction(), conn.cursor() as cur:
            began = True
            answer: Any = None
            while True:
                try:
                    step = steps.send(answer)
                except StopIteration as done:
                    reply: Reply = done.value
                    break
                if isinstance(step, Query):
                    cur.execute(sql(step.name), step.params)
                    answer = cur.fetchone() if cur.description else None
                else:
                    try:
                        with conn.transaction():  # savepoint: a refusal keeps no writes
                            answer = mutation(conn, request)
                    except PermanentFailure as failure:
                        answer = Refused(failure)
        return reply  # committed
    except (Abandon, RetryableFailure, *_CONFLICTS) as exc:
        return exchange.rolled_back(exc)
    except psycopg.OperationalError:
        if began:
            raise  # COMMIT (or a statement) failed: it may have committed
        return exchange.not_begun()
    finally:
        steps.close()


async def prune_ledger(
    conn: psycopg.AsyncConnection[Any], *, before: datetime | None = None, batch: int = 1000
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
    conn: psycopg.Connection[Any], *, before: datetime | None = None, batch: int = 1000
) -> int:
    """``prune_ledger`` for a synchronous connection."""
    pruned = 0
    while True:
        with conn.transaction():
            cur = conn.execute(sql("prune_keys"), {"before": before, "batch": batch})
        pruned += cur.rowcount
        if cur.rowcount < batch:
            return pruned

"""Run a business mutation under the destination contract, in one transaction with it.

Per request, atomically with the mutation:

- a completed key with the same argument hash replays the stored answer (no mutation);
- a known key with another argument hash is refused: 422, permanent_failure;
- a key whose transaction is still open elsewhere answers 409, unknown_outcome, at once;
- a fencing token below its resource's watermark answers 409, stale_fence (no mutation).
  A token equal to the watermark is accepted: each attempt gets a new, larger token, so an
  equal one can only be the current holder's;
- otherwise the mutation runs; its result (200) or its ``PermanentFailure`` is stored and
  committed with it, and replayed to every later attempt under the key.

A ``RetryableFailure``, a serialization failure or a deadlock roll everything back (the key
too) and answer 503 retryable_failure_known_not_committed. Any other exception rolls back and
propagates: the server answers 500 without an outcome header, which the dispatcher must treat
as unknown, and it is: a failed COMMIT may or may not have committed.

The deadline header is not enforced: it is another machine's clock, and late work is harmless
here because a retry replays it instead of repeating it.

The decisions are written once, as a generator of SQL steps (``_Exchange``); ``handle`` and
``handle_sync`` only carry those steps to an async or a sync connection.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg import errors, pq

from effectusd.core.canonical import canonical_bytes
from effectusd.core.states import OutcomeClass
from effectusd.destination.protocol import EffectusRequest
from effectusd.destination.queries import sql
from effectusd.destination.replies import (
    PermanentFailure,
    Reply,
    RetryableFailure,
    error_reply,
)

DEFAULT_RETENTION = timedelta(days=7)  # must outlast every retry budget of every caller
AsyncMutation = Callable[[psycopg.AsyncConnection[Any], EffectusRequest], Awaitable[Any]]
SyncMutation = Callable[[psycopg.Connection[Any], EffectusRequest], Any]
# Both end the transaction before anything of it committed, so retrying is safe.
_CONFLICTS = (errors.SerializationFailure, errors.DeadlockDetected)


@dataclass(frozen=True, slots=True)
class _Query:
    name: str
    params: dict[str, Any]


class _Mutate:
    """The step at which a driver runs the caller's mutation."""


@dataclass(frozen=True, slots=True)
class _Refused:
    failure: PermanentFailure


_MUTATE = _Mutate()
_Step = _Query | _Mutate


class _Abandon(Exception):
    """Roll the whole transaction back and answer ``reply``."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(reply.status)
        self.reply = reply


def _busy() -> Reply:
    message = "a request with this Idempotency-Key is still in progress"
    return error_reply(409, OutcomeClass.UNKNOWN, message)


class _Exchange:
    """The contract's decisions for one request. ``steps`` yields each statement to run (sent
    back its first row, or None) and ``_MUTATE`` (sent back the mutation's result, or
    ``_Refused``), and returns the reply. Raising ``_Abandon`` rolls everything back."""

    def __init__(self, request: EffectusRequest, retention: timedelta) -> None:
        self.request = request
        self.retention = retention
        self.checked_fences = False

    def steps(self) -> Generator[_Step, Any, Reply]:
        request = self.request
        key = {"key": request.idempotency_key}
        (acquired,) = yield _Query("try_lock_key", key)
        if not acquired:
            raise _Abandon(_busy())
        row = yield _Query("select_key", key)
        if row is not None:
            reply = self._answer_known(row)
            if reply.replayed:
                yield _Query("extend_key", {**key, "retention": self.retention})
            return reply
        # Grants come sorted by resource, so concurrent requests lock watermarks in one order.
        self.checked_fences = bool(request.fencing_grants)
        for grant in request.fencing_grants:
            accepted = yield _Query(
                "raise_watermark", {"resource": grant.resource, "token": grant.token}
            )
            if accepted is None:
                message = "X-Effectus-Fencing-Grants: a token is below its resource's watermark"
                raise _Abandon(
                    error_reply(409, OutcomeClass.STALE_FENCE, message, acknowledged=True)
                )
        inserted = yield _Query("insert_key", {**key, **self._identity()})
        if inserted is None:
            raise _Abandon(_busy())  # only if a writer outside the kit holds the key
        outcome = yield _MUTATE
        if isinstance(outcome, _Refused):
            reply = outcome.failure.reply(acknowledged=self.checked_fences)
        else:
            # Encoded before COMMIT: a result that is not JSON must roll the mutation back.
            reply = Reply(200, canonical_bytes(outcome), fencing_acknowledged=self.checked_fences)
        completion = {**key, **_stored(reply), "retention": self.retention}
        stored = yield _Query("complete_key", completion)
        if stored is None:
            raise RuntimeError("the ledger row vanished inside its own transaction")
        return reply

    def _answer_known(self, row: tuple[Any, ...]) -> Reply:
        argument_hash, state, status, body, outcome, acknowledged = row
        if argument_hash != self.request.argument_hash:
            message = "Idempotency-Key was already used with other arguments"
            return error_reply(422, OutcomeClass.PERMANENT, message)
        if state != "completed":
            return _busy()
        return Reply(
            status,
            bytes(body),
            OutcomeClass(outcome) if outcome is not None else None,
            fencing_acknowledged=acknowledged,
            replayed=True,
        )

    def _identity(self) -> dict[str, Any]:
        request = self.request
        return {
            "argument_hash": request.argument_hash,
            "saga_id": request.saga_id,
            "effect_id": request.effect_id,
            "direction": request.direction.value,
            "verb": request.verb,
            "request_id": request.request_id,
            "attempt": request.attempt,
            "retention": self.retention,
        }

    def rolled_back(self, exc: BaseException) -> Reply:
        """The answer after the transaction rolled back because of ``exc``."""
        if isinstance(exc, _Abandon):
            return exc.reply
        if isinstance(exc, RetryableFailure):
            return exc.reply(acknowledged=self.checked_fences)
        message = "transaction conflict; nothing was committed"
        return error_reply(503, OutcomeClass.RETRYABLE, message, acknowledged=self.checked_fences)


def _stored(reply: Reply) -> dict[str, Any]:
    return {
        "status_code": reply.status,
        "response_body": reply.body,
        "outcome": reply.outcome.value if reply.outcome is not None else None,
        "fencing_acknowledged": reply.fencing_acknowledged,
    }


def _require_idle(status: pq.TransactionStatus) -> None:
    if status != pq.TransactionStatus.IDLE:
        # The reply promises "committed"; only a transaction we begin and end can keep that.
        raise ValueError("handle() owns the transaction: pass a connection outside one")


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
    _require_idle(conn.info.transaction_status)
    exchange = _Exchange(request, retention)
    steps = exchange.steps()
    try:
        async with conn.transaction(), conn.cursor() as cur:
            answer: Any = None
            while True:
                try:
                    step = steps.send(answer)
                except StopIteration as done:
                    reply: Reply = done.value
                    break
                if isinstance(step, _Query):
                    await cur.execute(sql(step.name), step.params)
                    answer = await cur.fetchone() if cur.description else None
                else:
                    try:
                        async with conn.transaction():  # savepoint: a refusal keeps no writes
                            answer = await mutation(conn, request)
                    except PermanentFailure as failure:
                        answer = _Refused(failure)
        return reply  # committed
    except (_Abandon, RetryableFailure, *_CONFLICTS) as exc:
        return exchange.rolled_back(exc)
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
    _require_idle(conn.info.transaction_status)
    exchange = _Exchange(request, retention)
    steps = exchange.steps()
    try:
        with conn.transaction(), conn.cursor() as cur:
            answer: Any = None
            while True:
                try:
                    step = steps.send(answer)
                except StopIteration as done:
                    reply: Reply = done.value
                    break
                if isinstance(step, _Query):
                    cur.execute(sql(step.name), step.params)
                    answer = cur.fetchone() if cur.description else None
                else:
                    try:
                        with conn.transaction():  # savepoint: a refusal keeps no writes
                            answer = mutation(conn, request)
                    except PermanentFailure as failure:
                        answer = _Refused(failure)
        return reply  # committed
    except (_Abandon, RetryableFailure, *_CONFLICTS) as exc:
        return exchange.rolled_back(exc)
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

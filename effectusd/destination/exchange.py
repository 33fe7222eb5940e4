"""The destination contract's decisions for one request, written once for every database.

Per request, atomically with the business mutation:

- a completed key with the same argument hash replays the stored answer (no mutation);
- a known key with another argument hash is refused: 422, permanent_failure;
- a key whose transaction is still open elsewhere answers 409, unknown_outcome, at once;
- a fencing token below its resource's watermark answers 409, stale_fence (no mutation).
  A token equal to the watermark is accepted: each attempt gets a new, larger token, so an
  equal one can only be the current holder's;
- otherwise the mutation runs; its result (200) or its ``PermanentFailure`` is stored and
  committed with it, and replayed to every later attempt under the key.

A ``RetryableFailure`` or a transaction conflict (PostgreSQL: serialization failure or
deadlock; SQLite: the database stayed locked past the busy timeout) rolls everything back,
the key too, and answers 503 retryable_failure_known_not_committed; so does a database
connection that failed before or at BEGIN (no transaction began). Any other exception rolls
back and propagates: the server answers 500 without an outcome header, which the dispatcher
must treat as unknown, and it is: a failed COMMIT may or may not have committed.

Deadlines are enforced with a skew allowance (``clock_skew``: the deadline is the daemon's
database clock, checked here against this service's): a new key arriving past its deadline plus
the allowance answers 503 retryable_failure_known_not_committed with nothing run, and so does a
mutation whose transaction would commit past it (the clock is read once more right before
COMMIT, and the transaction rolls back). A caller can then trust that nothing commits under a
key after its deadline plus the allowance, and ask the ledger (probe.py) what became of it.

Retention: a key absent from the ledger whose ``X-Effectus-Key-Issued-At`` is older than the
retention (less the allowance) may have run and been pruned since, so it answers 410
unknown_outcome with nothing run. An operator's ``keys forget`` re-issues the key as of the
forget, so the retry it was done for runs. A request without the header (an older daemon) is
not checked.

``Exchange.steps`` is a generator of named SQL steps; ``Exchange.carry_out`` runs them in a
handler's transaction, sending each step to the handler's ``perform`` (ledger.py for
PostgreSQL, sqlite.py for SQLite) and the answer back, and turns what ended the transaction
into the reply (``Exchange.settle``), so the handlers cannot drift apart in what they decide:
each says only how its database begins, commits and runs a step.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from contextlib import AbstractAsyncContextManager, AbstractContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from effectusd.backends.errors import CONNECTION_FAILED, DATABASE_ERRORS, conflict
from effectusd.backends.operation import drive_async, finished
from effectusd.core.canonical import canonical_bytes
from effectusd.core.states import OutcomeClass
from effectusd.core.wire import DEADLINE, FENCING_GRANTS, KEY_ISSUED_AT
from effectusd.destination.protocol import EffectusRequest
from effectusd.destination.replies import (
    PermanentFailure,
    Reply,
    RetryableFailure,
    error_reply,
)

DEFAULT_RETENTION = timedelta(days=7)  # must outlast every retry budget of every caller
# How far this service's clock may differ from the daemon's database clock (and how long a
# COMMIT may take once the deadline was checked before it).
DEFAULT_CLOCK_SKEW = timedelta(seconds=5)
Clock = Callable[[], datetime]
# What a handler's transaction gives its steps to run on: a cursor, a connection.
On = TypeVar("On")


def wall_clock() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Query:
    """Run the named statement (sql/NAME.sql in the driver's dialect) with ``params``."""

    name: str
    params: dict[str, Any]


class Mutate:
    """The step at which a driver runs the caller's mutation."""


@dataclass(frozen=True, slots=True)
class Refused:
    """Sent back for ``MUTATE`` when the mutation raised PermanentFailure (its writes undone)."""

    failure: PermanentFailure


MUTATE = Mutate()
Step = Query | Mutate


class Abandon(Exception):
    """Roll the whole transaction back and answer ``reply``."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(reply.status)
        self.reply = reply


# What ``Exchange.settle`` may turn into an answer (it raises anything else again).
SETTLED: tuple[type[BaseException], ...] = (Abandon, RetryableFailure, *DATABASE_ERRORS)


def busy_reply() -> Reply:
    message = "a request with this Idempotency-Key is still in progress"
    return error_reply(409, OutcomeClass.UNKNOWN, message)


def late_reply() -> Reply:
    message = f"{DEADLINE}: past, with the clock skew allowance; nothing was done"
    return error_reply(503, OutcomeClass.RETRYABLE, message)


def outlived_reply() -> Reply:
    message = (
        f"{KEY_ISSUED_AT}: older than this ledger keeps answers and no answer is stored; "
        "it may have run and been pruned, so nothing was done"
    )
    return error_reply(410, OutcomeClass.UNKNOWN, message)


class Exchange:
    """The contract's decisions for one request. ``steps`` yields each statement to run (sent
    back its first row, or None) and ``MUTATE`` (sent back the mutation's result, or
    ``Refused``), and returns the reply. Raising ``Abandon`` rolls everything back."""

    def __init__(
        self,
        request: EffectusRequest,
        retention: timedelta,
        clock_skew: timedelta = DEFAULT_CLOCK_SKEW,
        clock: Clock = wall_clock,
    ) -> None:
        if retention <= clock_skew:
            # No key could be trusted absent: every one would be refused as outlived.
            raise ValueError("retention: must be longer than clock_skew")
        self.request = request
        self.retention = retention
        self.clock_skew = clock_skew
        self.clock = clock
        self.checked_fences = False

    def late(self) -> bool:
        """Past the request's deadline plus the skew allowance, by this service's clock."""
        return self.clock() > self.request.deadline + self.clock_skew

    def issued_before(self) -> datetime | None:
        """The moment before which an absent key may have been stored and pruned since: its
        row expires ``retention`` after it completed, no earlier than its issue time (less
        the skew). None when the key was issued after it, or the request did not say."""
        issued = self.request.key_issued_at
        cutoff = self.clock() - self.retention + self.clock_skew
        return cutoff if issued is not None and issued < cutoff else None

    def steps(self) -> Generator[Step, Any, Reply]:
        reply = yield from self._steps()
        return self.echo(reply)

    async def carry_out(
        self,
        transaction: AbstractAsyncContextManager[On],
        perform: Callable[[On, Step], Awaitable[Any]],
    ) -> Reply:
        """The request answered: ``steps`` run by ``perform`` in ``transaction`` (entering it
        begins, leaving it commits; what raised rolls back and is settled). Written once for
        every handler: each says only how its database begins, ends and runs a step."""
        steps = self.steps()
        began = False
        try:
            async with transaction as on:
                began = True
                reply = await drive_async(steps, lambda step: perform(on, step))
            return reply  # committed
        except SETTLED as exc:
            return self.settle(exc, began=began)
        finally:
            steps.close()

    def carry_out_blocking(
        self, transaction: AbstractContextManager[On], perform: Callable[[On, Step], Any]
    ) -> Reply:
        """``carry_out`` over a blocking connection: the same code, whose awaits never suspend,
        run without an event loop."""

        async def performed(on: On, step: Step) -> Any:
            return perform(on, step)

        return finished(self.carry_out(_entered(transaction), performed))

    def echo(self, reply: Reply) -> Reply:
        """``reply`` naming the request it answers (every reply does, replays included)."""
        return replace(reply, request_id=self.request.request_id)

    def _steps(self) -> Generator[Step, Any, Reply]:
        request = self.request
        key = {"key": request.idempotency_key}
        (acquired,) = yield Query("try_lock_key", key)
        if not acquired:
            raise Abandon(busy_reply())
        row = yield Query("select_key", key)
        if row is not None:
            reply = self._answer_known(row)
            if reply.replayed:
                yield Query("extend_key", {**key, "retention": self.retention})
            return reply
        cutoff = self.issued_before()
        if cutoff is not None:
            (forgotten,) = yield Query("key_forgotten_since", {**key, "since": cutoff.timestamp()})
            if not forgotten:
                raise Abandon(outlived_reply())
        if self.late():
            raise Abandon(late_reply())
        # Grants come sorted by resource, so concurrent requests lock watermarks in one order.
        self.checked_fences = bool(request.fencing_grants)
        for grant in request.fencing_grants:
            accepted = yield Query(
                "raise_watermark", {"resource": grant.resource, "token": grant.token}
            )
            if accepted is None:
                message = f"{FENCING_GRANTS}: a token is below its resource's watermark"
                raise Abandon(
                    error_reply(409, OutcomeClass.STALE_FENCE, message, acknowledged=True)
                )
        inserted = yield Query("insert_key", {**key, **self._identity()})
        if inserted is None:
            raise Abandon(busy_reply())  # only if a writer outside the kit holds the key
        outcome = yield MUTATE
        if isinstance(outcome, Refused):
            reply = outcome.failure.reply(acknowledged=self.checked_fences)
        else:
            # Encoded before COMMIT: a result that is not JSON must roll the mutation back.
            reply = Reply(200, canonical_bytes(outcome), fencing_acknowledged=self.checked_fences)
        completion = {**key, **_stored(reply), "retention": self.retention}
        stored = yield Query("complete_key", completion)
        if stored is None:
            raise RuntimeError("the ledger row vanished inside its own transaction")
        if self.late():  # the last moment before COMMIT: a late commit rolls back instead
            raise Abandon(late_reply())
        return reply

    def _answer_known(self, row: tuple[Any, ...]) -> Reply:
        argument_hash, state, status, body, outcome, acknowledged = row
        if argument_hash != self.request.argument_hash:
            message = "Idempotency-Key was already used with other arguments"
            return error_reply(422, OutcomeClass.PERMANENT, message)
        if state != "completed":
            return busy_reply()
        return Reply(
            status,
            bytes(body),
            OutcomeClass(outcome) if outcome is not None else None,
            fencing_acknowledged=bool(acknowledged),  # SQLite stores booleans as 0/1
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
        if isinstance(exc, Abandon):
            return self.echo(exc.reply)
        if isinstance(exc, RetryableFailure):
            return self.echo(exc.reply(acknowledged=self.checked_fences))
        # PostgreSQL: a serialization failure or deadlock; SQLite: the lock stayed taken.
        message = "transaction conflict or database busy; nothing was committed"
        reply = error_reply(503, OutcomeClass.RETRYABLE, message, acknowledged=self.checked_fences)
        return self.echo(reply)

    def settle(self, exc: BaseException, *, began: bool) -> Reply:
        """The answer after the transaction ended because of ``exc``; ``exc`` itself (raised
        again) when nothing can be promised: after BEGIN a failed statement or COMMIT may
        have committed."""
        if isinstance(exc, Abandon | RetryableFailure) or conflict(exc):
            return self.rolled_back(exc)
        if isinstance(exc, CONNECTION_FAILED) and not began:
            return self.not_begun()
        raise exc

    def not_begun(self) -> Reply:
        """The answer when the database connection failed before or at BEGIN: no statement
        of this exchange ran, so nothing was committed (and no fence was checked)."""
        message = "database connection failed before the transaction began; nothing was done"
        return error_reply(503, OutcomeClass.RETRYABLE, message)


@asynccontextmanager
async def _entered(transaction: AbstractContextManager[On]) -> AsyncIterator[On]:
    with transaction as on:
        yield on


def _stored(reply: Reply) -> dict[str, Any]:
    return {
        "status_code": reply.status,
        "response_body": reply.body,
        "outcome": reply.outcome.value if reply.outcome is not None else None,
        "fencing_acknowledged": reply.fencing_acknowledged,
    }

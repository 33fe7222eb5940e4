"""What a backend runs: an operation is a generator that yields ``(statement_name, params)``
and receives the rows (as dicts); ``params`` may be a list of rows, to run the statement once
per row. The backend executes the named statement in its own dialect, inside one transaction.

Written once for every database, so the store, fencing and the client share one piece of logic
whatever the driver (this module sits below all of them: it imports nothing of effectusd).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")
Y = TypeVar("Y")  # what a generator yields: a step to perform
S = TypeVar("S")  # what it is sent back: the step's answer
Rows = list[dict[str, Any]]
Params = Mapping[str, Any]
# A list of parameter rows runs the statement once per row (executemany); it returns no rows.
Query = tuple[str, Params | Sequence[Params]]
Operation = Generator[Query, Rows, T]


def single(name: str, params: Params) -> Operation[Rows]:
    """An operation of one statement: its rows."""
    return (yield (name, params))


def one_statement(operation: Operation[T]) -> Operation[T]:
    """The operation, refused if it asks for a second statement: for running it outside a
    transaction, where a second statement would not be atomic with the first."""
    name, params = next(operation)
    rows = yield (name, params)
    try:
        extra = operation.send(rows)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    raise RuntimeError(f"{extra[0]} after {name}: more than one statement needs a transaction")


def without_queries(value: T) -> Operation[T]:
    """An operation that needs no statement (an in-memory provider's): it just returns."""
    return value
    yield  # unreachable; makes this function a generator


@dataclass(frozen=True, slots=True)
class Done(Generic[T]):
    """What a generator of steps returned, told apart from a step it yields."""

    value: T


def advance(steps: Generator[Y, S, T], answer: S | None = None) -> Y | Done[T]:
    """The next step of ``steps``, sent ``answer`` for the last one (None: the first);
    Done once they returned."""
    try:
        return next(steps) if answer is None else steps.send(answer)  # send(None) is next()
    except StopIteration as stop:
        return Done(stop.value)


def drive(steps: Generator[Y, S, T], perform: Callable[[Y], S]) -> T:
    """Run ``steps`` to what they return, answering each with ``perform``'s: how a backend
    runs an operation, and the destination kit an exchange, whatever the driver."""
    step = advance(steps)
    while not isinstance(step, Done):
        step = advance(steps, perform(step))
    return step.value


async def drive_async(steps: Generator[Y, S, T], perform: Callable[[Y], Awaitable[S]]) -> T:
    """``drive`` with an asynchronous ``perform``."""
    step = advance(steps)
    while not isinstance(step, Done):
        step = advance(steps, await perform(step))
    return step.value


def finished(coroutine: Coroutine[Any, Any, T]) -> T:
    """What a coroutine returns when none of its awaits suspends (a blocking caller's reads and
    writes under logic written once, async): run to its end without an event loop."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coroutine.close()
    raise RuntimeError("a blocking caller's coroutine suspended")

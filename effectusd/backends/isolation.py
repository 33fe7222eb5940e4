"""Retry the transient, isolate the deterministic: how a batch is written while the database
misbehaves, written once for every batch writer (the recorder, the reclaim, the write-ahead).

Two kinds of failure, told apart by ``TRANSIENT_ERRORS``:

* transient (connection lost, deadlock, disk full, lock timeout): says nothing about the rows,
  so the same write is repeated with backoff (``retry_transient``); every write of ours is
  guarded, so a repeat after an ambiguous commit changes nothing twice;
* deterministic (anything else): a property of one row, so the batch is split in halves until
  the one item that cannot be written is found, and that item alone goes to its own handler
  while the rest is written (``isolate``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential

from effectusd.backends.errors import TRANSIENT_ERRORS

T = TypeVar("T")
R = TypeVar("R")

# Backoff of a repeated write: 50 ms doubling, at most 5 s between tries.
TRANSIENT_BACKOFF = wait_exponential(multiplier=0.05, max=5.0)


async def retry_transient(
    write: Callable[[], Awaitable[R]],
    on_retry: Callable[[BaseException, float], None] | None = None,
) -> R:
    """``write()``, repeated while it fails transiently (for as long as that lasts); any other
    failure is raised at once. ``on_retry(error, delay)`` is told before each wait."""

    def before_sleep(state: RetryCallState) -> None:
        if on_retry is not None and state.outcome is not None:
            error = state.outcome.exception()
            delay = state.next_action.sleep if state.next_action else 0.0
            if error is not None:
                on_retry(error, delay)

    async for attempt in AsyncRetrying(
        retry=retry_if_exception_type(TRANSIENT_ERRORS),
        wait=TRANSIENT_BACKOFF,
        before_sleep=before_sleep,
        reraise=True,
    ):
        with attempt:
            result = await write()
    return result


async def isolate(
    items: Sequence[T],
    write: Callable[[Sequence[T]], Awaitable[R]],
    alone: Callable[[T, Exception], Awaitable[R]],
    merge: Callable[[R, R], R],
    on_failure: Callable[[int, Exception], None] | None = None,
) -> R:
    """``write(items)``; if it raises, the halves are written the same way, down to the single
    items whose own write raises, each handed to ``alone(item, error)``. The results are put
    together with ``merge``. ``on_failure(size, error)`` is told of every failed write.
    ``items`` must not be empty."""
    try:
        return await write(items)
    except Exception as error:  # noqa: BLE001 - whatever one item raises, it is isolated
        if on_failure is not None:
            on_failure(len(items), error)
        if len(items) == 1:
            return await alone(items[0], error)
    middle = len(items) // 2
    first = await isolate(items[:middle], write, alone, merge, on_failure)
    return merge(first, await isolate(items[middle:], write, alone, merge, on_failure))

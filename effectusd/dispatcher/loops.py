"""The one shape every background actor of the daemon has (claimer, reclaimer, recorder,
listener, sampler): do a round, wait as long as the round says, repeat. A round that fails is
logged, counted and tried again after an exponential backoff; no error ends a loop, only
cancellation or a round that says it is done. The durable retry schedule of dispatches is the
engine's business, not this one's: these are in-process retries of work that has not happened.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential

from effectusd.backends.errors import DATABASE_ERRORS, failure_name
from effectusd.dispatcher.metrics import Metrics

log = logging.getLogger("effectusd.daemon")

# One round's wait: seconds until the next round, or None when the loop is done.
Round = Callable[[], Awaitable[float | None]]
BACKOFF = wait_exponential(multiplier=0.1, min=0.1, max=5.0)


@dataclass
class Loop:
    name: str
    round: Round
    metrics: Metrics
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    failing_since: float | None = None  # monotonic: the first failure of the current streak

    async def run(self) -> None:
        while True:
            async for attempt in AsyncRetrying(
                retry=retry_if_exception_type(Exception),
                wait=BACKOFF,
                sleep=self.sleep,
                before_sleep=self._failed,
            ):
                with attempt:
                    wait = await self.round()
            self.failing_since = None
            if wait is None:
                return
            if wait > 0:  # 0: go again at once (a claim that found work)
                await self.sleep(wait)

    def _failed(self, state: RetryCallState) -> None:
        if self.failing_since is None:
            self.failing_since = time.monotonic()
        self.metrics.loop_failures.labels(self.name).inc()
        error = state.outcome.exception() if state.outcome else None
        delay = state.next_action.sleep if state.next_action else 0.0
        if isinstance(error, DATABASE_ERRORS):
            log.warning(
                "%s: database trouble (%s); again in %.1fs",
                self.name,
                failure_name(error),
                delay,
            )
        else:
            log.error("%s round failed; again in %.1fs", self.name, delay, exc_info=error)

    def failing_for(self, now: float) -> float:
        """How long rounds have been failing, 0 while they work."""
        return 0.0 if self.failing_since is None else now - self.failing_since

    def start(self) -> asyncio.Task[None]:
        return asyncio.create_task(self.run(), name=self.name)

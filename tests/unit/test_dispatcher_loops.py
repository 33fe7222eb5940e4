"""The one background-loop shape: a failed round backs off and comes again, never ends the
loop; a round that says None ends it. Sleeps are recorded, not slept."""

from __future__ import annotations

import asyncio

import pytest

from effectusd.dispatcher.loops import Loop
from effectusd.dispatcher.metrics import Metrics


class Script:
    """Rounds that raise, wait or finish, in the order given."""

    def __init__(self, *steps: float | Exception | None) -> None:
        self.steps = list(steps)
        self.rounds = 0

    async def __call__(self) -> float | None:
        self.rounds += 1
        step = self.steps.pop(0)
        if isinstance(step, Exception):
            raise step
        return step


async def test_failed_rounds_back_off_and_the_loop_goes_on() -> None:
    slept: list[float] = []
    seen_failing: list[bool] = []
    metrics = Metrics()

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        seen_failing.append(loop.failing_since is not None)

    script = Script(RecursionError(), OSError("gone"), 2.0, 0.0, ValueError(), None)
    loop = Loop("claimer", script, metrics, sleep)
    await loop.run()

    assert script.rounds == 6
    # two backoffs that grow, the round's own wait, nothing for 0, a backoff that starts over
    assert slept[0] < slept[1] <= 5.0
    assert slept[2] == 2.0
    assert len(slept) == 4 and slept[3] == slept[0]
    assert seen_failing == [True, True, False, True]
    assert loop.failing_since is None
    assert metrics.loop_failures.labels("claimer")._value.get() == 3


async def test_cancellation_ends_a_loop() -> None:
    started = asyncio.Event()

    async def forever() -> float:
        started.set()
        await asyncio.Event().wait()
        return 0.0

    task = Loop("listener", forever, Metrics()).start()
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

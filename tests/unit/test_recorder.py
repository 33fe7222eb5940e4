"""The recorder's group commit, without a store: its port is a function that takes a batch
and returns a report, so each rule (one transaction per round, retry the transient, isolate
the deterministic, requeue the deferred, hold claims while behind) is checked on its own."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import psycopg
import pytest

from effectusd.backends.isolation import isolate
from effectusd.core.states import OutcomeClass
from effectusd.core.transition import Completion, HeldClaim
from effectusd.dispatcher.metrics import Metrics
from effectusd.dispatcher.recorder import Recorder
from effectusd.store.dispatch import RecordReport


def outcome(dispatch_id: int) -> Completion:
    return Completion.answered(HeldClaim(dispatch_id, 1, "lease"), OutcomeClass.SUCCESS)


class Port:
    """Writes every batch it is given, except: a batch holding a ``poison`` dispatch raises a
    deterministic error, the first ``transient`` writes raise a transient one, and ``defer``
    dispatches come back deferred (once)."""

    def __init__(
        self, poison: Sequence[int] = (), transient: int = 0, defer: Sequence[int] = ()
    ) -> None:
        self.poison = set(poison)
        self.transient = transient
        self.defer = set(defer)
        self.tried: list[list[int]] = []
        self.written: list[list[int]] = []
        self.quarantined: list[tuple[int, str]] = []

    async def write(self, batch: Sequence[Completion]) -> RecordReport:
        ids = [c.dispatch_id for c in batch]
        self.tried.append(ids)
        if self.transient:
            self.transient -= 1
            raise psycopg.OperationalError("connection lost")
        if self.poison & set(ids):
            raise ValueError("a row the store refuses")
        deferred = [c for c in batch if c.dispatch_id in self.defer]
        self.defer -= {c.dispatch_id for c in deferred}
        self.written.append([i for i in ids if i not in {c.dispatch_id for c in deferred}])
        return RecordReport(applied=len(batch) - len(deferred), deferred=deferred)

    async def quarantine(self, completion: Completion, failure: str) -> RecordReport:
        self.quarantined.append((completion.dispatch_id, failure))
        return RecordReport(applied=1, quarantined=1)


def recorder_on(port: Port, limit: int = 512, batch_size: int = 256) -> tuple[Recorder, list]:
    told: list[tuple[list[int], RecordReport]] = []
    recorder = Recorder(
        port,
        port.quarantine,
        Metrics(),
        recorded=lambda batch, report: told.append(([c.dispatch_id for c in batch], report)),
        caught_up=lambda: told.append(([], RecordReport())),
        batch_size=batch_size,
        limit=limit,
    )
    return recorder, told


async def test_a_round_writes_everything_waiting_in_one_write_up_to_the_batch_size() -> None:
    port = Port()
    recorder, told = recorder_on(port, batch_size=3)
    for dispatch_id in range(1, 6):
        recorder.put(outcome(dispatch_id))
    await recorder.round()
    await recorder.round()
    assert port.written == [[1, 2, 3], [4, 5]]
    assert [ids for ids, _ in told] == [[1, 2, 3], [4, 5]]
    assert recorder.idle
    await asyncio.wait_for(recorder.join(), 1)  # every outcome put in was recorded


async def test_a_transient_fault_repeats_the_same_write_and_the_recorder_says_it_was_failing() -> (
    None
):
    port = Port(transient=2)
    recorder, _ = recorder_on(port)
    failing: list[float | None] = []
    original = port.write

    async def watched(batch: Sequence[Completion]) -> RecordReport:
        failing.append(recorder.failing_since)
        return await original(batch)

    port.write = watched  # type: ignore[method-assign]
    report = await recorder.record([outcome(1), outcome(2)])
    assert port.tried == [[1, 2], [1, 2], [1, 2]]  # the whole batch each time, never split
    assert report.applied == 2 and port.quarantined == []
    assert failing[0] is None and failing[2] is not None  # failing while it retried
    assert recorder.failing_since is None  # and no longer once it wrote
    assert recorder.metrics.recorder_failures.labels("transient")._value.get() == 2


async def test_a_deterministic_fault_is_narrowed_to_its_one_outcome_and_the_rest_is_written() -> (
    None
):
    port = Port(poison=[3])
    recorder, told = recorder_on(port)
    report = await recorder.record([outcome(i) for i in range(1, 6)])
    assert sorted(i for batch in port.written for i in batch) == [1, 2, 4, 5]
    assert [dispatch_id for dispatch_id, _ in port.quarantined] == [3]
    assert port.quarantined[0][1] == "ValueError"  # the failure's class, never its message
    assert report.applied == 5 and report.quarantined == 1
    assert recorder.metrics.poison_isolated._value.get() == 1
    assert told[-1][0] == [1, 2, 3, 4, 5]  # the whole batch is reported recorded once


async def test_deferred_outcomes_go_back_in_the_queue_and_the_next_round_writes_them() -> None:
    port = Port(defer=[2])
    recorder, _ = recorder_on(port)
    recorder.put(outcome(1))
    recorder.put(outcome(2))
    await recorder.round()
    assert recorder.waiting == 1
    await recorder.round()
    assert port.written == [[1], [2]]
    assert recorder.waiting == 0


async def test_behind_while_the_limit_waits_and_caught_up_is_told_when_a_round_takes_it_under() -> (
    None
):
    port = Port()
    recorder, told = recorder_on(port, limit=4, batch_size=2)
    for dispatch_id in range(1, 5):
        recorder.put(outcome(dispatch_id))
    assert recorder.behind
    await recorder.round()
    assert not recorder.behind
    assert ([], RecordReport()) in told  # caught up: claims held back may go on


async def test_a_quarantine_that_cannot_be_written_drops_the_outcome_to_its_lease() -> None:
    port = Port(poison=[1])

    async def refused(completion: Completion, failure: str) -> RecordReport:
        raise ValueError("not even the block")

    recorder, _ = recorder_on(port)
    recorder.quarantine = refused
    report = await recorder.record([outcome(1), outcome(2)])
    assert report.dropped == 1 and report.applied == 1
    assert recorder.metrics.loop_failures.labels("recorder")._value.get() == 1


@pytest.mark.parametrize("size", [1, 2, 7, 64])
async def test_isolate_hands_exactly_the_failing_items_to_alone_whatever_the_batch_size(
    size: int,
) -> None:
    bad = {i for i in range(size) if i % 3 == 1}
    alone: list[int] = []

    async def write(items: Sequence[int]) -> list[int]:
        if bad & set(items):
            raise RuntimeError("bad item")
        return list(items)

    async def one(item: int, error: Exception) -> list[int]:
        alone.append(item)
        return []

    written = await isolate(list(range(size)), write, one, lambda a, b: a + b)
    assert sorted(alone) == sorted(bad)
    assert sorted(written) == sorted(set(range(size)) - bad)

"""The recorder: group commit of outcomes (docs/design.md section 7, step 5).

Outcomes are put in as their calls end; a round takes everything waiting (at most
``batch_size``) and writes it through one sink, ``Sink.write(batch) -> RecordReport``, in one
transaction. Around that one write the recorder owns what every group commit needs:

* a transient database fault repeats the write (``retry_transient``): every write is guarded,
  so a repeat after an ambiguous commit changes nothing twice;
* a deterministic fault is split in halves until the one outcome that cannot be written is
  found (``isolate``); that one goes to ``quarantine`` alone, the rest commits;
* outcomes the write deferred (a second one of a saga in the batch) go back in the queue;
* ``behind``: so many outcomes wait that nothing new may be claimed until a round catches up.

It knows nothing of stores, claims or spans: the pipeline gives it the sink (the daemon's is
``effectusd.dispatcher.capacity.ClaimingSink``) and is told of each recorded batch
(``recorded``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Protocol

from effectusd import faults
from effectusd.backends.errors import failure_name
from effectusd.backends.isolation import isolate, retry_transient
from effectusd.core.transition import Completion
from effectusd.dispatcher.metrics import Metrics
from effectusd.store.dispatch import RecordReport

log = logging.getLogger("effectusd.dispatcher")

RECORD_BATCH = 256
UNRECORDED_LIMIT = 2 * RECORD_BATCH  # outcomes waiting to be recorded: see Recorder.behind


class Sink(Protocol):
    """The recorder's port: where a batch is written."""

    async def write(self, batch: Sequence[Completion]) -> RecordReport:
        """Record ``batch`` in one transaction, or raise (nothing of it committed)."""
        ...


Quarantine = Callable[[Completion, str], Awaitable[RecordReport]]


class Recorder:
    def __init__(
        self,
        sink: Sink,
        quarantine: Quarantine,
        metrics: Metrics,
        *,
        recorded: Callable[[Sequence[Completion], RecordReport], None],
        caught_up: Callable[[], None],
        batch_size: int = RECORD_BATCH,
        limit: int = UNRECORDED_LIMIT,
    ) -> None:
        """``sink``: the port, one transaction per ``write``. ``quarantine``: settles the one
        outcome ``write`` cannot take, given the failure's name. ``recorded``: told of each
        batch recorded, with its report. ``caught_up``: told when the queue falls back under
        ``limit`` (claims held back may go on)."""
        self.sink = sink
        self.quarantine = quarantine
        self.metrics = metrics
        self.recorded = recorded
        self.caught_up = caught_up
        self.batch_size = batch_size
        self.limit = limit
        self.queue: asyncio.Queue[Completion] = asyncio.Queue()
        self.failing_since: float | None = None  # monotonic; None while writes work
        self.recording_since: float | None = None  # monotonic start of the batch being written

    def put(self, completion: Completion) -> None:
        self.queue.put_nowait(completion)

    @property
    def waiting(self) -> int:
        return self.queue.qsize()

    @property
    def behind(self) -> bool:
        """``limit`` outcomes wait to be recorded: no call should start until the recorder
        catches up, or answers would pile up in memory, their leases running."""
        return self.queue.qsize() >= self.limit

    @property
    def idle(self) -> bool:
        return self.recording_since is None and self.queue.empty()

    async def join(self) -> None:
        """Until every outcome put in is recorded."""
        await self.queue.join()

    async def round(self) -> float:
        """One group commit: wait for an outcome, take everything that waits with it."""
        batch = [await self.queue.get()]
        held_back = self.queue.qsize() + 1 >= self.limit
        while not self.queue.empty() and len(batch) < self.batch_size:
            batch.append(self.queue.get_nowait())
        if held_back and not self.behind:
            self.caught_up()
        self.recording_since = time.monotonic()
        try:
            await self.record(batch)
        finally:
            self.recording_since = None
            for _ in batch:
                self.queue.task_done()
        return 0.0

    async def record(self, batch: Sequence[Completion]) -> RecordReport:
        """Write ``batch`` now (isolating and retrying as above); deferred outcomes go back
        in the queue."""
        faults.point("before_record")
        report = await self.record_isolating(batch)
        faults.point("after_record")
        for completion in report.deferred:
            self.queue.put_nowait(completion)
        self.recorded(batch, report)
        return report

    async def record_isolating(self, batch: Sequence[Completion]) -> RecordReport:
        """Write ``batch``, each deterministic failure narrowed to its one outcome, which is
        quarantined; nothing goes back in the queue here."""
        return await isolate(
            batch, self._write_retrying, self._quarantine, RecordReport.merge, self._split
        )

    async def _write_retrying(self, batch: Sequence[Completion]) -> RecordReport:
        report = await retry_transient(partial(self.sink.write, batch), self._transient)
        self.failing_since = None
        return report

    def _transient(self, error: BaseException, delay: float) -> None:
        self.metrics.recorder_failures.labels("transient").inc()
        if self.failing_since is None:
            self.failing_since = time.monotonic()
        log.warning(
            "recording outcomes failed (%s); retrying in %.2fs", type(error).__name__, delay
        )

    def _split(self, size: int, error: Exception) -> None:
        self.metrics.recorder_failures.labels("deterministic").inc()
        if size > 1:
            log.warning(
                "recording %d outcome(s) failed (%s); splitting the batch to isolate it",
                size,
                type(error).__name__,
            )

    async def _quarantine(self, completion: Completion, error: Exception) -> RecordReport:
        failure = failure_name(error)
        log.error(
            "dispatch %s attempt %s: its outcome could not be recorded (%s); holding its saga "
            "in blocked_unknown",
            completion.dispatch_id,
            completion.attempt,
            failure,
        )
        try:
            report = await retry_transient(
                lambda: self.quarantine(completion, failure), self._transient
            )
        except Exception:
            # Not even the bare block could be written: leave the row to its lease, whose
            # reclaim settles the attempt from what the database says.
            log.exception("quarantine of dispatch %s failed", completion.dispatch_id)
            self.metrics.loop_failures.labels("recorder").inc()
            return RecordReport(dropped=1)
        self.failing_since = None
        self.metrics.poison_isolated.inc(report.quarantined)
        return report

"""The dispatch pipeline of docs/design.md section 7, top to bottom.

    1. claim      due rows for destinations with free capacity (one statement, SKIP LOCKED)
    2. reclaim    expired leases: not sent → known not committed; sent → unknown
    3. write-ahead fencing tokens and "may have been sent", durable before any call (on
                  PostgreSQL an unfenced row is written ahead by its claim: no statement here)
    4. call       the destination, concurrently, never past our own lease (monotonic clock)
    5. record     outcomes in group commits; the engine decides every transition

The external call never runs inside a database transaction.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import Any

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential

from effectusd import faults
from effectusd.backends.errors import TRANSIENT_ERRORS, failure_name
from effectusd.core.engine import Completion
from effectusd.core.registry import Registry
from effectusd.core.states import FencingStatus
from effectusd.core.transition import fencing_after_call
from effectusd.dispatcher.capacity import Capacity, RecordSlots
from effectusd.dispatcher.metrics import Metrics
from effectusd.dispatcher.observability import log_transition
from effectusd.dispatcher.spans import AttemptSpans
from effectusd.executors.protocol import CallResult, Executor, FencingGrant, Invocation
from effectusd.store.dispatch import DispatchStore, RecordReport
from effectusd.store.records import Claim, WriteAhead
from effectusd.tracing import AttemptTracer

log = logging.getLogger("effectusd.dispatcher")

# Never start a call unless the lease outlives the call's timeout by at least this much.
LEASE_SLACK_S = 0.05
LEASE_TOO_SHORT = "lease too short to finish the call; not sent"
RECORD_BATCH = 256
UNRECORDED_LIMIT = 2 * RECORD_BATCH  # outcomes waiting to be recorded: see Pipeline.behind


class Pipeline:
    def __init__(
        self,
        store: DispatchStore,
        executors: Mapping[str, Executor],
        registry: Registry,
        capacity: Capacity,
        wake: asyncio.Event,
        metrics: Metrics,
        claim_batch: int = 64,
        tracer: AttemptTracer | None = None,
    ) -> None:
        self.metrics = metrics
        # None while tracing is off: then each stage below costs one ``is None``.
        self.spans = None if tracer is None else AttemptSpans(tracer, store)
        self.claim_batch = claim_batch  # at most this many rows per destination per claim
        self.store = store
        self.executors = executors
        self.registry = registry
        self.capacity = capacity
        self.wake = wake
        self.completions: asyncio.Queue[Completion] = asyncio.Queue()
        self.calls: set[asyncio.Task[None]] = set()
        self.recorder_failing_since: float | None = None  # monotonic; None while recording works
        self.recording_since: float | None = None  # monotonic start of the batch being recorded
        self.reports: list[RecordReport] = []  # kept only while a test or bench asks for them
        self.keep_reports = False
        self.claiming = True  # the recorder claims where a slot is free; off before a drain

    # -- 1. claim ------------------------------------------------------------------------
    async def claim_once(self) -> int:
        """Claim what fits, and start each claim on its way. Returns how many were claimed."""
        free = {dest: min(slots, self.claim_batch) for dest, slots in self.free().items()}
        if not free:
            return 0
        room = self.capacity.room
        started = time.monotonic()  # before the claim: our local view of the lease is early
        self.capacity.reserve(free)  # the recorder may take slots while the claim runs
        claims: list[Claim] = []
        try:
            claims = await self.store.claim(free, room, write_ahead=True)
        finally:
            self.capacity.keep(free, (claim.destination for claim in claims))
        if not claims:
            return 0
        self._start(claims, started)
        return len(claims)

    @property
    def behind(self) -> bool:
        """UNRECORDED_LIMIT outcomes wait to be recorded: no call starts until the recorder
        catches up, or answers would pile up in memory, their leases running (a slot is free
        again when its call ends); two batches keep the recorder's batches full."""
        return self.completions.qsize() >= UNRECORDED_LIMIT

    def free(self) -> dict[str, int]:
        """The slots a claim may take now: none while the recorder is ``behind``."""
        return {} if self.behind else self.capacity.free()

    def _start(self, claims: list[Claim], claimed_at: float) -> None:
        """Send claimed rows (their slots taken) on their way: write-ahead, then call."""
        faults.point("after_claim")
        metrics = self.metrics
        for claim in claims:
            metrics.child(metrics.enqueue_to_dispatch_seconds, claim.destination).observe(
                max((claim.db_now - claim.created_at).total_seconds(), 0.0)
            )
        task = asyncio.create_task(self.dispatch_batch(claims, claimed_at))
        self.calls.add(task)
        task.add_done_callback(self.calls.discard)

    # -- 2. reclaim ----------------------------------------------------------------------
    async def reclaim_once(self) -> int:
        try:
            report = await self.store.reclaim_expired()
        except TRANSIENT_ERRORS:
            raise
        except Exception as exc:  # noqa: BLE001 - any deterministic failure is isolated below
            # One expired row the store cannot settle must not stall the reclaim of all the
            # others: settle them through the recorder, which isolates the poison.
            log.warning("reclaim batch failed (%s); settling one by one", failure_name(exc))
            report = await self._record_isolating(
                await self.store.expired_completions(), self._slots()
            )
        # Siblings of one parallel saga expire together (a daemon died holding both); the
        # store settles one per saga per batch and defers the rest: settle them now, not a
        # reclaim interval later.
        while report.deferred:
            deferred, report.deferred = report.deferred, []
            report = report.merge(await self._record_isolating(deferred, self._slots()))
        self.metrics.reclaims.inc(report.applied)
        self._after_record(report)
        if report.applied:
            log.info("reclaimed %d expired lease(s)", report.applied)
        return report.applied

    # -- 3 and 4: write-ahead, then call ----------------------------------------------------
    async def dispatch_batch(self, claims: list[Claim], claimed_at: float) -> None:
        spans = self.spans
        if spans is not None:
            await spans.claimed(claims, claimed_at)
        sendable: list[Claim] = []
        for claim in claims:
            contract = self.registry.verbs.get(claim.verb)
            if contract is None or not contract.pins(claim.contract_hash):
                drift = "contract drift: nothing was sent"
                self._finish(claim, Completion.not_sent(claim, drift, contract_drift=True))
            elif claim.budget_spent:
                # the budget was lowered in config below the attempts already made
                self._finish(claim, Completion.not_sent(claim, "retry budget spent; not sent"))
            elif not _lease_covers_call(claim, claimed_at):
                self._finish(claim, Completion.not_sent(claim, LEASE_TOO_SHORT))
            else:
                sendable.append(claim)
        # A claim born written ahead (unfenced, on PostgreSQL) is called at once; the others
        # take their fencing tokens and their mark here.
        ready = [
            WriteAhead(claim, (), FencingStatus.NOT_REQUESTED)
            for claim in sendable
            if claim.written_ahead
        ]
        unmarked = [claim for claim in sendable if not claim.written_ahead]
        if unmarked:
            ready += await self._write_ahead(unmarked)
        if not ready:
            return
        faults.point("after_write_ahead")
        if spans is not None:
            spans.written_ahead(ready)
        await asyncio.gather(*(self.call(w, claimed_at) for w in ready))

    async def _write_ahead(self, sendable: list[Claim]) -> list[WriteAhead]:
        """The write-ahead of claims not born written ahead: the ones that may now be called
        (the others are settled not sent, or left to their leases)."""
        spans = self.spans
        try:
            # A claim whose own write-ahead fails comes back in not_sent, settled alone.
            ready, not_sent = await self.store.write_ahead(sendable)
        except Exception:
            # The write-ahead may or may not have committed. Nothing was sent; the leases
            # expire and the reclaim settles each attempt from what the database says.
            log.exception(
                "write-ahead failed for %d claim(s); leaving them to reclaim", len(sendable)
            )
            self.metrics.write_ahead_failures.inc(len(sendable))
            for claim in sendable:
                self.capacity.give_back(claim.destination)
            self.wake.set()
            if spans is not None:
                spans.abandoned(sendable, "write-ahead failed; left to the lease's reclaim")
            return []
        self.metrics.fencing_acquisitions.inc(sum(len(w.grants) for w in ready))
        self.metrics.fencing_conflicts.inc(sum(1 for c in not_sent if c.fence_wait))
        self.metrics.write_ahead_failures.inc(sum(1 for c in not_sent if not c.fence_wait))
        for completion, claim in _pair(not_sent, sendable):
            self._finish(claim, completion)
        marked = {w.claim.dispatch_id for w in ready} | {c.dispatch_id for c in not_sent}
        for claim in sendable:
            if claim.dispatch_id not in marked:  # lease lost before the write-ahead: not ours
                self.capacity.give_back(claim.destination)
                self.wake.set()
                if spans is not None:
                    spans.abandoned([claim], "lease lost before the write-ahead")
        return ready

    async def call(self, ahead: WriteAhead, claimed_at: float) -> None:
        claim = ahead.claim
        timeout = claim.timeout_ms / 1000
        if not _lease_covers_call(claim, claimed_at):
            # Marked sent but never sent: recorded as known not committed, by us, with a reason.
            self._finish(claim, Completion.not_sent(claim, LEASE_TOO_SHORT))
            return
        trace_headers, token = (None, None) if self.spans is None else self.spans.calling(claim)
        invocation = Invocation(
            request_id=claim.request_id,
            execution_id=claim.execution_id,
            saga_id=claim.saga_id,
            effect_id=claim.effect_id,
            attempt=claim.attempt,
            direction=claim.direction,
            verb=claim.verb,
            method=claim.method,
            path=claim.path,
            body=claim.body,
            argument_hash=claim.args_hash,
            contract_hash=claim.contract_hash,
            idempotency_key=claim.idempotency_key,
            fencing_grants=tuple(FencingGrant(r, t) for r, t in ahead.grants),
            deadline=claim.db_now + timedelta(seconds=timeout),
            timeout=timeout,
            trace_headers=trace_headers,
        )
        metrics = self.metrics
        in_flight = metrics.child(metrics.in_flight, claim.destination)
        in_flight.inc()
        started = time.perf_counter()
        try:
            result = await self.executors[claim.destination].call(invocation)
        finally:
            in_flight.dec()
        if self.spans is not None:
            self.spans.called(claim, token, result)
        metrics.child(metrics.call_seconds, claim.destination, claim.verb).observe(
            time.perf_counter() - started
        )
        faults.point("after_call")
        self._finish(claim, _completion(claim, ahead, result))

    def _finish(self, claim: Claim, completion: Completion) -> None:
        self.capacity.give_back(claim.destination)
        self.completions.put_nowait(completion)
        self.wake.set()  # a slot is free again

    # -- 5. record -------------------------------------------------------------------------
    async def record_round(self) -> float:
        """Group commit: take everything that finished meanwhile and record it in one go."""
        batch = [await self.completions.get()]
        held_back = self.completions.qsize() + 1 >= UNRECORDED_LIMIT
        while not self.completions.empty() and len(batch) < RECORD_BATCH:
            batch.append(self.completions.get_nowait())
        if held_back and not self.behind:
            self.wake.set()  # the claims held back for this recorder may go on meanwhile
        self.recording_since = time.monotonic()
        try:
            await self.record(batch)
        finally:
            self.recording_since = None
            for _ in batch:
                self.completions.task_done()
        return 0.0

    async def record(self, batch: list[Completion]) -> None:
        faults.point("before_record")
        report = await self._record_isolating(batch, self._slots())
        faults.point("after_record")
        if self.spans is not None:
            self.spans.recorded(batch, report)
        for completion in report.deferred:
            self.completions.put_nowait(completion)
        self._after_record(report)

    def _slots(self) -> RecordSlots:
        return RecordSlots(self.capacity, lambda: self.claiming and not self.behind)

    async def _record_isolating(self, batch: list[Completion], slots: RecordSlots) -> RecordReport:
        """Record ``batch``; a batch that fails deterministically is split in halves until
        the one completion that cannot be recorded is found. That one is quarantined alone
        (its saga blocks with the error as evidence); the rest of the batch commits."""
        try:
            return await self._retrying_transient(self._record_claiming, batch, slots)
        except Exception as exc:  # noqa: BLE001 - whatever one row raises, it is isolated
            self.metrics.recorder_failures.labels("deterministic").inc()
            if len(batch) == 1:
                return await self._quarantine(batch[0], exc)
            log.warning(
                "recording %d outcome(s) failed (%s); splitting the batch to isolate it",
                len(batch),
                type(exc).__name__,
            )
            middle = len(batch) // 2
            first = await self._record_isolating(batch[:middle], slots)
            return first.merge(await self._record_isolating(batch[middle:], slots))

    async def _record_claiming(self, batch: list[Completion], slots: RecordSlots) -> RecordReport:
        """Record ``batch``; the next dispatches that get a slot (``slots``, taken with no
        await between check and take) are written claimed in the same transaction and started
        at once. If the transaction does not commit, every slot it took is given back."""
        started = time.monotonic()  # before the transaction: our view of the lease is early
        try:
            report = await self.store.record(batch, slots)
        except BaseException:
            slots.undo()
            raise
        slots.committed()
        if report.claimed:
            self._start(report.claimed, started)
        return report

    async def _quarantine(self, completion: Completion, exc: Exception) -> RecordReport:
        failure = failure_name(exc)
        log.error(
            "dispatch %s attempt %s: its outcome could not be recorded (%s); holding its saga "
            "in blocked_unknown",
            completion.dispatch_id,
            completion.attempt,
            failure,
        )
        try:
            report = await self._retrying_transient(self.store.quarantine, completion, failure)
        except Exception:
            # Not even the bare block could be written: leave the row to its lease, whose
            # reclaim settles the attempt from what the database says.
            log.exception("quarantine of dispatch %s failed", completion.dispatch_id)
            self.metrics.loop_failures.labels("recorder").inc()
            return RecordReport(dropped=1)
        self.metrics.poison_isolated.inc(report.quarantined)
        return report

    async def _retrying_transient(
        self, write: Callable[..., Awaitable[RecordReport]], *args: Any
    ) -> RecordReport:
        """Repeat a write while the database fails transiently. Every write is guarded, so
        repeating it is safe; an ambiguous commit is settled by the guards on the repeat."""
        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type(TRANSIENT_ERRORS),
            wait=wait_exponential(multiplier=0.05, max=5.0),
            before_sleep=self._note_transient,
            reraise=True,
        ):
            with attempt:
                report = await write(*args)
        self.recorder_failing_since = None
        return report

    def _note_transient(self, state: RetryCallState) -> None:
        self.metrics.recorder_failures.labels("transient").inc()
        if self.recorder_failing_since is None:
            self.recorder_failing_since = time.monotonic()
        exc = state.outcome.exception() if state.outcome else None
        log.warning(
            "recording outcomes failed (%s); retrying in %.2fs",
            type(exc).__name__,
            state.next_action.sleep if state.next_action else 0.0,
        )

    def _after_record(self, report: RecordReport) -> None:
        self.metrics.late_completions.inc(report.late)
        for completion, transition, row in report.transitions:
            self.metrics.child(
                self.metrics.outcomes,
                row["destination"],
                row["verb"],
                row["direction"],
                completion.outcome.value,
            ).inc()
            log_transition(completion, transition, row)
        if report.notified or report.applied:
            self.wake.set()
        if self.keep_reports:
            self.reports.append(report)

    @property
    def idle(self) -> bool:
        busy = self.calls or self.capacity.busy or self.recording_since is not None
        return not busy and self.completions.empty()


def _lease_covers_call(claim: Claim, claimed_at: float) -> bool:
    """Judged on the local monotonic clock, from before the claim was even sent."""
    lease_ends = claimed_at + claim.lease_seconds
    return time.monotonic() + claim.timeout_ms / 1000 + LEASE_SLACK_S <= lease_ends


def _completion(claim: Claim, ahead: WriteAhead, result: CallResult) -> Completion:
    return Completion.of(
        claim,
        result.outcome,
        status_code=result.status_code,
        result=result.result,
        error=result.error,
        evidence=result.evidence,
        fencing_status=fencing_after_call(
            FencingStatus(ahead.fencing_status), result.outcome, result.fencing_acknowledged
        ),
    )


def _pair(completions: list[Completion], claims: list[Claim]) -> list[tuple[Completion, Claim]]:
    by_id = {claim.dispatch_id: claim for claim in claims}
    return [(completion, by_id[completion.dispatch_id]) for completion in completions]

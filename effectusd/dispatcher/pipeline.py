"""The dispatch pipeline of docs/design.md section 7, top to bottom.

    1. claim      due rows for destinations with free capacity (one statement, SKIP LOCKED)
    2. reclaim    expired leases: not sent → known not committed; sent → unknown
    3. write-ahead fencing tokens and "may have been sent", durable before any call (on
                  PostgreSQL an unfenced row is written ahead by its claim: no statement here)
    4. call       the destination, concurrently, never past our own lease (monotonic clock)
    5. record     outcomes in group commits (``Recorder``, through ``ClaimingSink``, which
                  claims the next steps a record writes); the engine decides every transition

The external call never runs inside a database transaction.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Mapping, Sequence
from datetime import timedelta

from effectusd import faults
from effectusd.backends.errors import TRANSIENT_ERRORS, failure_name
from effectusd.core.engine import Completion
from effectusd.core.pre_send import LEASE_TOO_SHORT, pre_send
from effectusd.core.registry import Registry
from effectusd.core.states import Cause, FencingStatus
from effectusd.core.transition import FenceWait
from effectusd.dispatcher.capacity import Capacity, ClaimingSink
from effectusd.dispatcher.metrics import Metrics
from effectusd.dispatcher.observability import observe_record
from effectusd.dispatcher.recorder import Recorder
from effectusd.dispatcher.spans import NO_SPANS, AttemptSpans, NoSpans
from effectusd.executors.protocol import Executor, FencingGrant, Invocation
from effectusd.store.dispatch import DispatchStore, RecordReport
from effectusd.store.records import Claim, WriteAhead
from effectusd.tracing import AttemptTracer

log = logging.getLogger("effectusd.dispatcher")

# Never start a call unless the lease outlives the call's timeout by at least this much.
LEASE_SLACK_S = 0.05


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
        self.spans: NoSpans = NO_SPANS if tracer is None else AttemptSpans(tracer, store)
        self.claim_batch = claim_batch  # at most this many rows per destination per claim
        self.store = store
        self.executors = executors
        self.registry = registry
        self.capacity = capacity
        self.wake = wake
        sink = ClaimingSink(store, capacity, self._may_claim, self._claimed)
        self.recorder = Recorder(
            sink,
            store.quarantine,
            metrics,
            recorded=self._recorded,
            caught_up=wake.set,
        )
        self.calls: set[asyncio.Task[None]] = set()
        self.claiming = True  # a record claims where a slot is free; off before a drain
        self.claims_failing = False  # the last claim raised: the next asks for one row
        # Claims a record made while their destination was full, each with the monotonic
        # time its record began (its lease's start, as we see it): the destination's next
        # free slot is theirs before the claim loop's (Capacity.may_wait).
        self.waiting: dict[str, deque[tuple[Claim, float]]] = {}

    # -- 1. claim ------------------------------------------------------------------------
    async def claim_once(self) -> int:
        """Claim what fits, and start each claim on its way. Returns how many were claimed."""
        free = {dest: min(slots, self.claim_batch) for dest, slots in self.free().items()}
        if not free:
            return 0
        room = self.capacity.room
        if self.claims_failing:
            # The store may be down: a claim waits out its pool while holding the slots it
            # asked for, which another store's work may want. One row until a claim works
            # (one that finds none of this destination's leaves the next claim due at once).
            free, room = {next(iter(free)): 1}, 1
        started = time.monotonic()  # before the claim: our local view of the lease is early
        self.capacity.reserve(free)  # the recorder may take slots while the claim runs
        claims: list[Claim] = []
        self.claims_failing = True  # until the claim returns
        try:
            claims = await self.store.claim(free, room, write_ahead=True)
            self.claims_failing = False
        finally:
            self.capacity.keep(free, (claim.destination for claim in claims))
            self._start_waiting()  # slots the claim did not use
        if not claims:
            return 0
        self._start(claims, started)
        return len(claims)

    def free(self) -> dict[str, int]:
        """The slots a claim may take now: none while the recorder is ``behind`` (a slot is
        free again when its call ends, before its outcome is recorded)."""
        return {} if self.recorder.behind else self.capacity.free()

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
            report = await self.recorder.record_isolating(await self.store.expired_completions())
        # Siblings of one parallel saga expire together (a daemon died holding both); the
        # store settles one per saga per batch and defers the rest: settle them now, not a
        # reclaim interval later.
        while report.deferred:
            deferred, report.deferred = report.deferred, []
            report = report.merge(await self.recorder.record_isolating(deferred))
        self.metrics.reclaims.inc(report.applied)
        self._after_record(report)
        if report.applied:
            log.info("reclaimed %d expired lease(s)", report.applied)
        return report.applied

    # -- 3 and 4: write-ahead, then call ----------------------------------------------------
    async def dispatch_batch(self, claims: list[Claim], claimed_at: float) -> None:
        await self.spans.claimed(claims, claimed_at)
        sendable: list[Claim] = []
        verbs = self.registry.verbs
        for claim in claims:
            stopped = pre_send(claim, verbs.get(claim.verb), _lease_covers_call(claim, claimed_at))
            if stopped is None:
                sendable.append(claim)
            else:
                self._finish(claim, stopped)
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
        self.spans.written_ahead(ready)
        await asyncio.gather(*(self.call(w, claimed_at) for w in ready))

    async def _write_ahead(self, sendable: list[Claim]) -> list[WriteAhead]:
        """The write-ahead of claims not born written ahead: the ones that may now be called
        (the others are settled not sent, or left to their leases)."""
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
                self._give_back(claim.destination)
            self.wake.set()
            self.spans.abandoned(sendable, "write-ahead failed; left to the lease's reclaim")
            return []
        self.metrics.fencing_acquisitions.inc(sum(len(w.grants) for w in ready))
        waits = sum(1 for c in not_sent if isinstance(c.cause, FenceWait))
        self.metrics.fencing_conflicts.inc(waits)
        self.metrics.write_ahead_failures.inc(len(not_sent) - waits)
        for completion, claim in _pair(not_sent, sendable):
            self._finish(claim, completion)
        marked = {w.claim.dispatch_id for w in ready} | {c.dispatch_id for c in not_sent}
        for claim in sendable:
            if claim.dispatch_id not in marked:  # lease lost before the write-ahead: not ours
                self._give_back(claim.destination)
                self.wake.set()
                self.spans.abandoned([claim], "lease lost before the write-ahead")
        return ready

    async def call(self, ahead: WriteAhead, claimed_at: float) -> None:
        claim = ahead.claim
        timeout = claim.timeout_ms / 1000
        if not _lease_covers_call(claim, claimed_at):
            # Marked sent but never sent: recorded as known not committed, by us, with a reason.
            self._finish(claim, Completion.not_sent(claim, Cause.LEASE_TOO_SHORT, LEASE_TOO_SHORT))
            return
        trace_headers, token = self.spans.calling(claim)
        invocation = Invocation(
            request_id=claim.request_id,
            execution_id=claim.execution_id,
            saga_id=claim.saga_id,
            effect_id=claim.effect_id,
            attempt=claim.request_number,  # X-Effectus-Attempt: requests written
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
            key_issued_at=claim.created_at,  # the dispatch's enqueue: the same for every attempt
            timeout=timeout,
            dispatch_id=claim.dispatch_id,
            lease_token=claim.lease_token,
            fencing_sent=ahead.fencing_status,
            trace_headers=trace_headers,
            claim_attempt=claim.attempt,
        )
        metrics = self.metrics
        in_flight = metrics.child(metrics.in_flight, claim.destination)
        in_flight.inc()
        started = time.perf_counter()
        try:
            completion = await self.executors[claim.destination].call(invocation)
        finally:
            in_flight.dec()
        self.spans.called(claim, token, completion)
        metrics.child(metrics.call_seconds, claim.destination, claim.verb).observe(
            time.perf_counter() - started
        )
        faults.point("after_call")
        self._finish(claim, completion)

    def _finish(self, claim: Claim, completion: Completion) -> None:
        self._give_back(claim.destination)
        self.recorder.put(completion)
        self.wake.set()  # a slot is free again

    def _give_back(self, destination: str) -> None:
        """A slot of ``destination`` is free: a claim waiting for one takes it first."""
        self.capacity.give_back(destination)
        if self.waiting:
            self._start_waiting()

    def _start_waiting(self) -> None:
        """Start every waiting claim a slot is free for (with no await: nothing else can
        take the slot between the check and the take)."""
        capacity = self.capacity
        for destination, queue in list(self.waiting.items()):
            while queue and capacity.has_room_for(destination):
                claim, claimed_at = queue.popleft()
                capacity.take(destination)
                capacity.waiting[destination] -= 1
                self.metrics.child(self.metrics.waiting_for_slot, destination).dec()
                self._start([claim], claimed_at)
            if not queue:
                del self.waiting[destination]

    # -- 5. record: the Recorder's group commit through its ClaimingSink; told of each batch
    def _may_claim(self) -> bool:
        return self.claiming and not self.recorder.behind

    def _claimed(self, now: list[Claim], waiting: list[Claim], started: float) -> None:
        """A record's claims (``ClaimingSink``): those with a slot go on their way, the others
        wait for their destination's next free slot."""
        if now:
            self._start(now, started)
        for claim in waiting:
            self.waiting.setdefault(claim.destination, deque()).append((claim, started))
            self.metrics.child(self.metrics.waiting_for_slot, claim.destination).inc()
        if waiting:
            self._start_waiting()  # a call may have ended while the record committed

    def _recorded(self, batch: Sequence[Completion], report: RecordReport) -> None:
        self.spans.recorded(batch, report)
        self._after_record(report)

    def _after_record(self, report: RecordReport) -> None:
        observe_record(self.metrics, report)
        if report.notified or report.applied:
            self.wake.set()

    @property
    def idle(self) -> bool:
        return not self.calls and not self.capacity.busy and not self.waiting and self.recorder.idle


def _lease_covers_call(claim: Claim, claimed_at: float) -> bool:
    """Judged on the local monotonic clock, from before the claim was even sent."""
    lease_ends = claimed_at + claim.lease_seconds
    return time.monotonic() + claim.timeout_ms / 1000 + LEASE_SLACK_S <= lease_ends


def _pair(completions: list[Completion], claims: list[Claim]) -> list[tuple[Completion, Claim]]:
    by_id = {claim.dispatch_id: claim for claim in claims}
    return [(completion, by_id[completion.dispatch_id]) for completion in completions]

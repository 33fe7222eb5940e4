"""The dispatch side of a store: claim, reclaim, write-ahead, record, for every store.

The operations here are written once, as generators of named statements (see
``operations.py``); each store runs them in its own dialect and transaction. Decisions come
from core: the recorder reads the facts under the store's write lock, asks
``effectusd.core.settlement``, and writes what it says (write-ahead: ``write_ahead.py``).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol, TypeVar

from effectusd import faults
from effectusd.backends import Session
from effectusd.backends.operation import Operation, single
from effectusd.core.plan import CheckedPlan
from effectusd.core.poison import PoisonedDispatch, held_completion, quarantine
from effectusd.core.registry import Registry
from effectusd.core.settlement import (
    SettlementFacts,
    Verdict,
    holds_lease,
    settle_completion,
)
from effectusd.core.states import (
    Direction,
    DispatchState,
    SagaState,
)
from effectusd.core.transition import Completion, SagaFacts, Transition
from effectusd.fencing.authority import select_counters
from effectusd.fencing.protocol import FencingProvider
from effectusd.store.operations import BLOCKED_STATES
from effectusd.store.records import Claim
from effectusd.store.rows import (
    TransitionRows,
    attempt_facts,
    locked_dispatch,
    may_cancel_siblings,
    notify_rows,
    saga_facts,
    steps_by_saga,
    write_rows,
)
from effectusd.store.write_ahead import WriteAheadStore

T = TypeVar("T")
log = logging.getLogger("effectusd.store")


class ClaimSlots(Protocol):
    """The daemon's slots, as the recorder claims into them (the dispatcher's RecordSlots)."""

    def take(self, destination: str, may_wait: bool) -> bool:
        """Take a slot for a new dispatch to ``destination``, or where ``may_wait`` a place
        among the claims waiting for one (True), or say there is neither."""


@dataclass
class RecordReport:
    applied: int = 0
    late: int = 0
    dropped: int = 0
    quarantined: int = 0
    deferred: list[Completion] = field(default_factory=list)
    # (completion, transition, the dispatch row it applied to)
    transitions: list[tuple[Completion, Transition, dict[str, Any]]] = field(default_factory=list)
    notified: set[str] = field(default_factory=set)
    # new dispatches written claimed by this daemon (``record``'s ``take_slot``): to call now
    claimed: list[Claim] = field(default_factory=list)
    # the (dispatch_id, lease_token) holders whose fencing leases the record gave back
    released: list[tuple[int, str]] = field(default_factory=list)

    def merge(self, other: RecordReport) -> RecordReport:
        return RecordReport(
            applied=self.applied + other.applied,
            late=self.late + other.late,
            dropped=self.dropped + other.dropped,
            quarantined=self.quarantined + other.quarantined,
            deferred=self.deferred + other.deferred,
            transitions=self.transitions + other.transitions,
            notified=self.notified | other.notified,
            claimed=self.claimed + other.claimed,
            released=self.released + other.released,
        )


@dataclass(frozen=True)
class Leased:
    """An attempt under a lease, as an expired-lease row names it."""

    dispatch_id: int
    attempt: int
    lease_token: str


@dataclass(frozen=True)
class OutboxSample:
    """What the gauges show: due rows, the oldest one's age, live sagas by state."""

    ready_depth: int
    oldest_ready_s: float
    sagas: dict[str, int]


@dataclass
class _Locked:
    """What the recorder read under its lock, by key."""

    sagas: dict[str, dict[str, Any]]
    steps: dict[str, list[Mapping[str, Any]]]  # select_steps_of_sagas rows, by saga
    dispatches: dict[int, dict[str, Any]]
    attempts: dict[tuple[int, int], dict[str, Any]]
    plans: dict[str, CheckedPlan]

    def saga(self, saga_id: str) -> SagaFacts:
        """Built only when a completion settles: building them checks the saga's plan."""
        return saga_facts(self.sagas[saga_id], self.steps.get(saga_id, ()), self.plans)


class DispatchStore(WriteAheadStore):
    """What the pipeline asks of a store. The backend's session runs each operation in a
    write or a read transaction; a store of one dialect supplies ``_claim``; the rest is
    shared."""

    def __init__(
        self,
        session: Session,
        registry: Registry,
        owner: str,
        lease_margin_s: float,
        fencing: FencingProvider,
        namespace: str | None = None,
    ) -> None:
        """``namespace``: claim only that namespace's rows (a daemon serving several stores);
        None, every row (the one store's daemon). PostgreSQL only: several stores are."""
        self.session = session
        self.namespace = namespace
        self.registry = registry
        self.owner = owner
        self.lease_margin_s = lease_margin_s
        self.fencing = fencing
        self._plans: dict[str, CheckedPlan] = {}

    async def _write(self, operation: Operation[T]) -> T:
        return await self.session.write(operation)

    async def _write_single(self, operation: Operation[T]) -> T:
        return await self.session.write_single(operation)

    async def _read(self, operation: Operation[T]) -> T:
        return await self.session.read(operation)

    async def _claim(
        self, wanted: list[tuple[str, int]], total: int, write_ahead: bool
    ) -> list[Claim]:
        raise NotImplementedError

    # A store that can write a new dispatch already claimed, in the record transaction.
    claims_in_record = False

    def _insert_claimed(self, rows: list[dict[str, Any]]) -> Operation[list[Claim]]:
        raise NotImplementedError

    async def close(self) -> None:
        """Give back connections and threads (the fencing authority's too)."""
        await self.session.close()
        await self.fencing.close()

    # -- 1. claim --------------------------------------------------------------------------
    async def claim(
        self, capacity: Mapping[str, int], total: int | None = None, *, write_ahead: bool = False
    ) -> list[Claim]:
        """Lease up to ``capacity[destination]`` due rows per destination, and at most
        ``total`` in all, dealt in turns (see ``deal_in_turns``) so that the destinations
        with due rows share the room and idle ones take none of it.

        ``write_ahead``: a store that can (PostgreSQL) also writes ahead each claimed row that
        takes no fencing token, in the claim's transaction (``Claim.written_ahead``); the
        caller calls those at once and writes the others ahead itself."""
        wanted = [(dest, free) for dest, free in capacity.items() if free > 0]
        ceiling = sum(free for _, free in wanted)
        total = ceiling if total is None else min(total, ceiling)
        if not wanted or total <= 0:
            return []
        return await self._claim(wanted, total, write_ahead)

    # -- 2. reclaim expired leases ----------------------------------------------------------
    async def reclaim_expired(self, limit: int = 100) -> RecordReport:
        return await self._released(await self._write(self._reclaim(limit)))

    async def expired_completions(self, limit: int = 100) -> list[Completion]:
        """What ``reclaim_expired`` would record, read on its own: the pipeline records
        these one by one when a reclaim batch cannot be recorded whole."""
        return await self._read(self._expired(limit))

    def _reclaim(self, limit: int) -> Operation[RecordReport]:
        """Settle attempts whose lease ran out: not sent → known not committed; sent →
        unknown (and an at_most_once verb is then blocked, never re-sent)."""
        completions = yield from self._expired(limit)
        if not completions:
            return RecordReport()
        return (yield from self._record(completions))

    def _expired(self, limit: int) -> Operation[list[Completion]]:
        expired = yield ("select_expired_leases", {"limit": limit})
        return [
            Completion.reclaimed(
                Leased(row["dispatch_id"], row["attempt"], str(row["lease_token"])),
                sent=row["sent_at"] is not None,
                lease_owner=row["lease_owner"],
                actor=self.owner,
            )
            for row in expired
        ]

    # -- 5. record outcomes (group commit) ---------------------------------------------------
    async def record(
        self, completions: Sequence[Completion], slots: ClaimSlots | None = None
    ) -> RecordReport:
        """``slots``: where this store can (``claims_in_record``), each new dispatch that
        ``slots`` has a slot for is written claimed by this daemon and comes back in
        ``claimed``, to be called at once."""
        taker = slots if self.claims_in_record else None
        report = await self._write(self._record(completions, crash_point=True, slots=taker))
        if report.released:  # a daemon fencing through the authority of several stores
            await self.fencing.released(report.released)
        return report

    async def _released(self, report: RecordReport) -> RecordReport:
        """After a record committed: give back what its holders took where the store does
        not keep it (the fencing authority of several stores)."""
        await self.fencing.released(report.released)
        return report

    def _record(
        self,
        completions: Sequence[Completion],
        crash_point: bool = False,
        slots: ClaimSlots | None = None,
    ) -> Operation[RecordReport]:
        """Load the facts under lock, ask ``settle_completion`` for each completion (one
        transition per saga per batch; the rest are deferred), write what it says."""
        locked = yield from self._lock_for_settlement(completions)
        report = RecordReport()
        writes = TransitionRows()
        touched: set[str] = set()
        for completion in completions:
            drow = locked.dispatches.get(completion.dispatch_id)
            attempt = locked.attempts.get((completion.dispatch_id, completion.attempt))
            if drow is None or attempt is None:
                report.dropped += 1
                continue
            saga_id = drow["saga_id"]
            if saga_id in touched:
                report.deferred.append(completion)
                continue
            settlement = settle_completion(
                completion,
                SettlementFacts(
                    locked_dispatch(drow), attempt_facts(attempt), partial(locked.saga, saga_id)
                ),
                self.registry,
                random.random(),
            )
            if settlement.late:
                writes.late(completion)
            if settlement.verdict is Verdict.DROP:
                report.dropped += 1
            elif settlement.verdict is Verdict.LATE:
                report.late += 1
            elif settlement.transition is not None:
                touched.add(saga_id)
                applied = settlement.applied or completion
                writes.apply(applied, drow, settlement.transition)
                report.applied += 1
                report.transitions.append((applied, settlement.transition, drow))
        claimed: list[dict[str, Any]] = []
        if slots is not None:
            claimed = writes.claim_new(slots.take)
        yield from write_rows(writes)
        if claimed:
            report.claimed = yield from self._insert_claimed(claimed)
        if writes.released:
            yield from self.fencing.release(writes.released)
            report.released = writes.released
        yield from notify_rows(writes)
        report.notified = writes.destinations
        if crash_point:
            faults.point("during_record")  # inside the transaction, before it commits
        return report

    def _lock_for_settlement(self, completions: Sequence[Completion]) -> Operation[_Locked]:
        ids: set[int] = set()
        attempt_keys: dict[str, list[int]] = {"dispatch_ids": [], "attempts": []}
        for c in completions:  # one pass: the dispatches to lock, the attempts to read
            ids.add(c.dispatch_id)
            attempt_keys["dispatch_ids"].append(c.dispatch_id)
            attempt_keys["attempts"].append(c.attempt)
        dispatch_ids = sorted(ids)
        # Lock order: sagas, then their dispatches (the operator actions take the same order).
        saga_rows = yield (
            "lock_sagas",
            {
                "saga_ids": [],
                "dispatch_ids": dispatch_ids,
                "known_plans": list(self._plans),
                "blocked_states": BLOCKED_STATES,
            },
        )
        # With the dispatches, the forward ones not yet sent of the sagas with parallel steps
        # (see lock_dispatches): the engine may cancel those, so no claim may take one before
        # this commits. A sequential saga has no such sibling, and is not searched for one.
        sagas: dict[str, dict[str, Any]] = {}
        parallel: list[str] = []
        for row in saga_rows:
            sagas[row["saga_id"]] = row
            if may_cancel_siblings(row, self._plans):
                parallel.append(row["saga_id"])
        dispatch_rows = yield (
            "lock_dispatches",
            {"dispatch_ids": dispatch_ids, "saga_ids": parallel},
        )
        attempt_rows = yield ("select_completion_attempts", attempt_keys)
        step_rows = yield ("select_steps_of_sagas", {"saga_ids": list(sagas)})
        locked = _Locked(sagas, steps_by_saga(step_rows), {}, {}, self._plans)
        for row in dispatch_rows:
            locked.dispatches[row["dispatch_id"]] = row
        for row in attempt_rows:
            locked.attempts[row["dispatch_id"], row["attempt"]] = row
        return locked

    # -- 5b. quarantine one completion the recorder could not write ------------------------
    async def quarantine(self, completion: Completion, failure: str) -> RecordReport:
        """Settle ``completion`` alone into ``blocked_unknown`` with ``failure`` as evidence
        (see ``effectusd.core.poison``); reads neither the plan nor the facts."""
        return await self._released(await self._write(self._quarantine(completion, failure)))

    def _quarantine(self, completion: Completion, failure: str) -> Operation[RecordReport]:
        report = RecordReport()
        held = held_completion(completion, failure)
        sagas = yield ("lock_saga_state_of_dispatch", {"dispatch_id": held.dispatch_id})
        rows = yield ("lock_dispatches", {"dispatch_ids": [held.dispatch_id], "saga_ids": []})
        if not sagas or not rows:
            report.dropped += 1
            return report
        drow = rows[0]
        writes = TransitionRows()
        if not holds_lease(held, locked_dispatch(drow)):
            writes.late(held)  # superseded meanwhile: kept as evidence on its attempt
            report.late += 1
        else:
            transition = quarantine(
                held,
                PoisonedDispatch(
                    effect_id=drow["effect_id"],
                    direction=Direction(drow["direction"]),
                    state=DispatchState(drow["state"]),
                    attempt=drow["attempt"],
                    uncertain_attempt=drow["uncertain_attempt"],
                    saga_state=SagaState(sagas[0]["state"]),
                ),
            )
            writes.apply(held, drow, transition)
            report.applied += 1
            report.quarantined += 1
            report.transitions.append((held, transition, drow))
        yield from write_rows(writes)
        if writes.released:
            yield from self.fencing.release(writes.released)
            report.released = writes.released
        return report

    # -- waiting and watching ---------------------------------------------------------------
    async def seconds_until_due(self, destinations: list[str]) -> float | None:
        params = {"destinations": destinations, "namespace": self.namespace}
        rows = await self._read(single("next_due", params))
        seconds = rows[0]["seconds"] if rows else None
        return None if seconds is None else float(seconds)

    async def outbox_counts(self, horizon_s: float) -> tuple[int, int]:
        params = {"horizon_s": horizon_s, "namespace": self.namespace}
        rows = await self._read(single("outbox_counts", params))
        return int(rows[0]["in_flight"] or 0), int(rows[0]["due_soon"] or 0)

    async def sample(self) -> OutboxSample:
        return await self._read(outbox_sample())

    async def fencing_counters(self) -> list[tuple[str, int]]:
        """Every resource this store granted and its last token."""
        return await self._read(select_counters())

    async def ping(self) -> None:
        await self._read(single("health_ping", {}))

    async def trace_contexts(self, saga_ids: list[str]) -> dict[str, str]:
        """The stored submit trace context of each saga that has one (tracing only)."""
        rows = await self._read(single("select_trace_contexts", {"saga_ids": saga_ids}))
        return {row["saga_id"]: row["trace_context"] for row in rows}


def outbox_sample() -> Operation[OutboxSample]:
    """What the gauges show (and the console's overview), read in one transaction."""
    queue = yield ("metrics_ready_queue", {})
    live = yield ("metrics_live_sagas", {})
    return OutboxSample(
        ready_depth=int(queue[0]["depth"]) if queue else 0,
        oldest_ready_s=max(float(queue[0]["oldest_s"] or 0.0), 0.0) if queue else 0.0,
        sagas={row["state"]: int(row["n"]) for row in live},
    )


def deal_in_turns(candidates: Mapping[str, Sequence[T]], total: int) -> list[T]:
    """At most ``total`` of the candidates, each destination's first before anyone's second
    (the order PostgreSQL's claim_ready deals in), so room follows the work."""
    dealt: list[T] = []
    for turn in range(max((len(rows) for rows in candidates.values()), default=0)):
        for rows in candidates.values():
            if turn < len(rows):
                dealt.append(rows[turn])
                if len(dealt) == total:
                    return dealt
    return dealt

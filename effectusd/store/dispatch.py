"""The dispatch side of a store: claim, reclaim, write-ahead, record, for every store.

The operations here are written once, as generators of named statements (see
``operations.py``); each store runs them in its own dialect and transaction. Decisions come
from ``effectusd.core.engine``: an operation reads the facts under the store's write lock,
asks the engine, and writes what it says.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

from effectusd import faults
from effectusd.core.canonical import canonical_text
from effectusd.core.engine import (
    Completion,
    FenceWait,
    SagaFacts,
    SagaUpdate,
    StepFacts,
    Transition,
    as_settled_late,
    late_completion_settles,
    settle,
)
from effectusd.core.plan import CheckedPlan
from effectusd.core.poison import PoisonedDispatch, held_completion, quarantine
from effectusd.core.registry import Registry
from effectusd.core.states import (
    Delivery,
    Direction,
    DispatchState,
    FencingStatus,
    OutcomeClass,
    SagaState,
    StepState,
)
from effectusd.fencing.protocol import FenceBusy, FenceHolder, FencingProvider
from effectusd.store.operations import Operation, failure_name, resumed_reason, single
from effectusd.store.records import Claim, WriteAhead
from effectusd.store.rows import TransitionRows, batches, dispatch_facts

T = TypeVar("T")
log = logging.getLogger("effectusd.store")


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

    def merge(self, other: RecordReport) -> RecordReport:
        return RecordReport(
            applied=self.applied + other.applied,
            late=self.late + other.late,
            dropped=self.dropped + other.dropped,
            quarantined=self.quarantined + other.quarantined,
            deferred=self.deferred + other.deferred,
            transitions=self.transitions + other.transitions,
            notified=self.notified | other.notified,
        )


@dataclass(frozen=True)
class OutboxSample:
    """What the gauges show: due rows, the oldest one's age, live sagas by state."""

    ready_depth: int
    oldest_ready_s: float
    sagas: dict[str, int]


class DispatchStore:
    """What the pipeline asks of a store. A store supplies ``_write``/``_read`` (run an
    operation in a write or a read transaction) and ``_claim``; the rest is shared."""

    def __init__(
        self, registry: Registry, owner: str, lease_margin_s: float, fencing: FencingProvider
    ) -> None:
        self.registry = registry
        self.owner = owner
        self.lease_margin_s = lease_margin_s
        self.fencing = fencing
        self._plans: dict[str, CheckedPlan] = {}

    async def _write(self, operation: Operation[T]) -> T:
        raise NotImplementedError

    async def _read(self, operation: Operation[T]) -> T:
        raise NotImplementedError

    async def _claim(self, wanted: list[tuple[str, int]], total: int) -> list[Claim]:
        raise NotImplementedError

    async def _write_single(self, operation: Operation[T]) -> T:
        """An operation of exactly one write statement, which is atomic by itself: a store may
        spare the BEGIN/COMMIT round trips."""
        return await self._write(operation)

    async def close(self) -> None:
        """Give back connections and threads."""

    # -- 1. claim --------------------------------------------------------------------------
    async def claim(self, capacity: Mapping[str, int], total: int | None = None) -> list[Claim]:
        """Lease up to ``capacity[destination]`` due rows per destination, and at most
        ``total`` in all, dealt in turns (see ``deal_in_turns``) so that the destinations
        with due rows share the room and idle ones take none of it."""
        wanted = [(dest, free) for dest, free in capacity.items() if free > 0]
        ceiling = sum(free for _, free in wanted)
        total = ceiling if total is None else min(total, ceiling)
        if not wanted or total <= 0:
            return []
        return await self._claim(wanted, total)

    # -- 2. reclaim expired leases ----------------------------------------------------------
    async def reclaim_expired(self, limit: int = 100) -> RecordReport:
        return await self._write(self._reclaim(limit))

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
            Completion(
                dispatch_id=row["dispatch_id"],
                attempt=row["attempt"],
                lease_token=str(row["lease_token"]),
                outcome=(
                    OutcomeClass.UNKNOWN if row["sent_at"] is not None else OutcomeClass.RETRYABLE
                ),
                settled_by="reclaim",
                error=f"lease of {row['lease_owner']} expired "
                + (
                    "after the call may have been sent"
                    if row["sent_at"]
                    else "before anything was sent"
                ),
                actor=self.owner,
            )
            for row in expired
        ]

    # -- 3. write-ahead ----------------------------------------------------------------------
    async def write_ahead(
        self, claims: Sequence[Claim]
    ) -> tuple[list[WriteAhead], list[Completion]]:
        """Take fencing tokens and mark each claim sent, in one transaction.

        Returns the claims that may now be called, and known-not-committed completions for the
        claims that must not be: a fencing resource is held by another live dispatch (a fence
        wait), or the claim's own write-ahead failed (the error is the evidence). A failed batch
        is tried again claim by claim, so one bad claim never holds back the others.
        """
        try:
            return await self._write_ahead_batch(claims)
        except Exception as error:  # noqa: BLE001 - each claim is tried alone below
            if len(claims) == 1:
                return [], [self._write_ahead_failed(claims[0], error)]
            log.warning(
                "write-ahead of %d claims failed (%s); trying each claim alone",
                len(claims),
                failure_name(error),
            )
        ready: list[WriteAhead] = []
        not_sent: list[Completion] = []
        for claim in claims:
            try:
                one_ready, one_busy = await self._write_ahead_batch([claim])
            except Exception as error:  # noqa: BLE001 - settles this claim only, as evidence
                not_sent.append(self._write_ahead_failed(claim, error))
            else:
                ready += one_ready
                not_sent += one_busy
        return ready, not_sent

    async def _write_ahead_batch(
        self, claims: Sequence[Claim]
    ) -> tuple[list[WriteAhead], list[Completion]]:
        operation = self._write_ahead(claims)
        if any(claim.fencing_resources for claim in claims):
            return await self._write(operation)
        return await self._write_single(operation)  # unfenced: the one write_ahead statement

    def _write_ahead_failed(self, claim: Claim, error: Exception) -> Completion:
        """Nothing is ever called after a failed write-ahead: known not committed."""
        log.warning(
            "write-ahead of dispatch %s failed (%s); nothing was sent",
            claim.dispatch_id,
            failure_name(error),
        )
        return Completion(
            dispatch_id=claim.dispatch_id,
            attempt=claim.attempt,
            lease_token=claim.lease_token,
            outcome=OutcomeClass.RETRYABLE,
            settled_by="guard",
            error=f"write-ahead failed ({failure_name(error)}); nothing was sent",
            actor=self.owner,
        )

    def _write_ahead(
        self, claims: Sequence[Claim]
    ) -> Operation[tuple[list[WriteAhead], list[Completion]]]:
        ready: list[WriteAhead] = []
        waiting: list[tuple[Claim, str]] = []  # (claim, the resource another dispatch holds)
        fenced = [claim for claim in claims if claim.fencing_resources]
        if fenced:
            # Claims are taken in claim order, each claim's resources in canonical order: only
            # one global lock order over the whole batch keeps two batches from deadlocking.
            yield from self.fencing.lock([r for claim in fenced for r in claim.fencing_resources])
        for claim in claims:
            if not claim.fencing_resources:
                ready.append(WriteAhead(claim, (), FencingStatus.NOT_REQUESTED.value))
                continue
            holder = FenceHolder(claim.dispatch_id, claim.lease_token, claim.lease_expires_at)
            try:
                grants = yield from self.fencing.acquire(holder, claim.fencing_resources)
            except FenceBusy as taken:
                waiting.append((claim, taken.resource))
            else:
                ready.append(WriteAhead(claim, grants, self.fencing.status.value))
        busy = (yield from self._fence_waits(waiting)) if waiting else []
        if not ready:
            return [], busy
        marked_rows = yield (
            "write_ahead",
            {
                "dispatch_ids": [w.claim.dispatch_id for w in ready],
                "attempts": [w.claim.attempt for w in ready],
                "lease_tokens": [w.claim.lease_token for w in ready],
                "grants": [grants_json(w.grants) for w in ready],
                "fencing_statuses": [w.fencing_status for w in ready],
            },
        )
        marked = {row["dispatch_id"] for row in marked_rows}
        return [w for w in ready if w.claim.dispatch_id in marked], busy

    def _fence_waits(self, waiting: Sequence[tuple[Claim, str]]) -> Operation[list[Completion]]:
        """Count each busy claim as a fence wait (not an attempt of the retry budget) and tell
        the engine how long the wait has lasted and who holds the resource."""
        marked = yield (
            "mark_fence_waits",
            {
                "dispatch_ids": [claim.dispatch_id for claim, _ in waiting],
                "attempts": [claim.attempt for claim, _ in waiting],
                "lease_tokens": [claim.lease_token for claim, _ in waiting],
            },
        )
        waited = {row["dispatch_id"]: float(row["waited_s"] or 0.0) for row in marked}
        holders = {
            row["resource"]: row
            for row in (
                yield ("select_fence_holders", {"resources": sorted({r for _, r in waiting})})
            )
        }
        busy = []
        for claim, resource in waiting:
            who = _holder_name(holders.get(resource))
            busy.append(
                Completion(
                    dispatch_id=claim.dispatch_id,
                    attempt=claim.attempt,
                    lease_token=claim.lease_token,
                    outcome=OutcomeClass.RETRYABLE,
                    settled_by="guard",
                    # the resource itself is not named: its text may carry argument values
                    error=(
                        f"a fencing resource is held by another live dispatch ({who}); "
                        "nothing was sent"
                    ),
                    actor=self.owner,
                    fence_wait=FenceWait(
                        timedelta(seconds=max(waited.get(claim.dispatch_id, 0.0), 0.0)), who
                    ),
                )
            )
        return busy

    # -- 5. record outcomes (group commit) ---------------------------------------------------
    async def record(self, completions: Sequence[Completion]) -> RecordReport:
        return await self._write(self._record(completions, crash_point=True))

    def _record(
        self, completions: Sequence[Completion], crash_point: bool = False
    ) -> Operation[RecordReport]:
        report = RecordReport()
        ids = sorted({c.dispatch_id for c in completions})
        # Lock order: sagas, then their dispatches (the operator actions take the same order).
        saga_rows = yield ("lock_sagas_of_dispatches", {"dispatch_ids": ids})
        sagas = {row["saga_id"]: row for row in saga_rows}
        dispatch_rows = yield ("lock_dispatches", {"dispatch_ids": ids})
        dispatches = {row["dispatch_id"]: row for row in dispatch_rows}
        attempt_rows = yield (
            "select_completion_attempts",
            {
                "dispatch_ids": [c.dispatch_id for c in completions],
                "attempts": [c.attempt for c in completions],
            },
        )
        attempts = {(row["dispatch_id"], row["attempt"]): row for row in attempt_rows}
        steps: dict[str, dict[str, StepFacts]] = {}
        for row in (yield ("select_steps_of_sagas", {"saga_ids": list(sagas)})):
            steps.setdefault(row["saga_id"], {})[row["effect_id"]] = StepFacts(
                row["effect_id"], row["sequence"], StepState(row["state"]), row["result"]
            )

        writes = TransitionRows()
        touched: set[str] = set()
        for completion in completions:
            drow = dispatches.get(completion.dispatch_id)
            attempt_row = attempts.get((completion.dispatch_id, completion.attempt))
            if drow is None or attempt_row is None:
                report.dropped += 1
                continue
            if drow["saga_id"] in touched:
                report.deferred.append(completion)  # one transition per saga per batch
                continue
            dispatch = dispatch_facts(drow)
            guard_holds = (
                drow["state"] == DispatchState.IN_FLIGHT.value
                and drow["attempt"] == completion.attempt
                and str(drow["lease_token"]) == completion.lease_token
                and (completion.settled_by != "reclaim" or drow["lease_expired"])
            )
            if not guard_holds:
                if completion.settled_by == "reclaim":
                    report.dropped += 1  # the holder finished first: nothing to reclaim
                    continue
                if attempt_row["settled_by"] == completion.settled_by == "executor":
                    report.dropped += 1  # our own earlier commit went through after all
                    continue
                if not late_completion_settles(completion, dispatch, attempt_row["later_sent"]):
                    writes.late(completion)
                    report.late += 1
                    continue
                writes.late(completion)
                dispatch = as_settled_late(dispatch, completion)
            transition = settle(
                completion,
                dispatch,
                self._saga_facts(sagas[drow["saga_id"]], steps.get(drow["saga_id"], {})),
                self.registry,
                random.random(),
            )
            if transition.saga is not None:  # a late answer may move a blocked saga on
                transition.saga = SagaUpdate(
                    transition.saga.state,
                    (
                        yield from resumed_reason(
                            drow["saga_id"],
                            SagaState(sagas[drow["saga_id"]]["state"]),
                            transition.saga.state,
                            transition.saga.stop_reason,
                        )
                    ),
                )
            touched.add(drow["saga_id"])
            writes.apply(completion, drow, transition)
            report.applied += 1
            report.transitions.append((completion, transition, drow))
        for name, params in batches(writes):
            if params:
                yield name, params
        yield from self.fencing.release(writes.released)
        for destination in sorted(writes.destinations):
            yield ("notify_outbox", {"destination": destination})
        report.notified = writes.destinations
        if crash_point:
            faults.point("during_record")  # inside the transaction, before it commits
        return report

    # -- 5b. quarantine one completion the recorder could not write ------------------------
    async def quarantine(self, completion: Completion, failure: str) -> RecordReport:
        """Settle ``completion`` alone into ``blocked_unknown`` with ``failure`` as evidence
        (see ``effectusd.core.poison``); reads neither the plan nor the facts."""
        return await self._write(self._quarantine(completion, failure))

    def _quarantine(self, completion: Completion, failure: str) -> Operation[RecordReport]:
        report = RecordReport()
        held = held_completion(completion, failure)
        sagas = yield ("lock_saga_state_of_dispatch", {"dispatch_id": held.dispatch_id})
        rows = yield ("lock_dispatches", {"dispatch_ids": [held.dispatch_id]})
        if not sagas or not rows:
            report.dropped += 1
            return report
        drow = rows[0]
        writes = TransitionRows()
        if not (
            drow["state"] == DispatchState.IN_FLIGHT.value
            and drow["attempt"] == held.attempt
            and str(drow["lease_token"]) == held.lease_token
        ):
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
        for name, params in batches(writes):
            if params:
                yield name, params
        yield from self.fencing.release(writes.released)
        return report

    def _saga_facts(self, row: dict[str, Any], steps: dict[str, StepFacts]) -> SagaFacts:
        plan = self._plans.get(row["plan_digest"])
        if plan is None:
            plan = CheckedPlan.model_validate(row["plan"])
            self._plans[row["plan_digest"]] = plan
        return SagaFacts(
            saga_id=row["saga_id"],
            namespace=row["namespace"],
            execution_id=row["execution_id"],
            state=SagaState(row["state"]),
            cancel_requested=bool(row["cancel_requested"]),
            plan=plan,
            facts=row["facts"],
            steps=steps,
        )

    # -- waiting and watching ---------------------------------------------------------------
    async def seconds_until_due(self, destinations: list[str]) -> float | None:
        rows = await self._read(single("next_due", {"destinations": destinations}))
        seconds = rows[0]["seconds"] if rows else None
        return None if seconds is None else float(seconds)

    async def outbox_counts(self, horizon_s: float) -> tuple[int, int]:
        rows = await self._read(single("outbox_counts", {"horizon_s": horizon_s}))
        return int(rows[0]["in_flight"] or 0), int(rows[0]["due_soon"] or 0)

    async def sample(self) -> OutboxSample:
        return await self._read(_sample())

    async def ping(self) -> None:
        await self._read(single("health_ping", {}))


def _sample() -> Operation[OutboxSample]:
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


def _holder_name(row: Mapping[str, Any] | None) -> str:
    if row is None:  # a provider that keeps no lease rows (in-memory)
        return "holder not recorded"
    if row["saga_id"] is None:  # the holder's saga was pruned meanwhile
        return f"dispatch {row['holder_dispatch_id']}"
    return (
        f"dispatch {row['holder_dispatch_id']} of saga {row['saga_id']}, "
        f"lease owner {row['lease_owner']}"
    )


def grants_json(grants: Iterable[tuple[str, int]]) -> str:
    return canonical_text([{"resource": r, "token": t} for r, t in sorted(grants)])


def claim_from_row(row: Mapping[str, Any]) -> Claim:
    return Claim(
        dispatch_id=row["dispatch_id"],
        saga_id=row["saga_id"],
        effect_id=row["effect_id"],
        direction=Direction(row["direction"]),
        execution_id=row["execution_id"],
        destination=row["destination"],
        verb=row["verb"],
        contract_hash=row["contract_hash"],
        delivery=Delivery(row["delivery"]),
        method=row["method"],
        path=row["path"],
        body=row["args_canonical"].encode("utf-8"),
        args_hash=row["args_hash"],
        idempotency_key=row["idempotency_key"],
        fencing_resources=tuple(row["fencing_resources"]),
        timeout_ms=row["timeout_ms"],
        max_attempts=row["max_attempts"],
        fence_waits=row["fence_waits"],
        attempt=row["attempt"],
        lease_token=str(row["lease_token"]),
        lease_expires_at=row["lease_expires_at"],
        request_id=str(row["request_id"]),
        db_now=row["db_now"],
        created_at=row["created_at"],
    )

"""The enqueue and settlement entries a saga's rows carry instead of stored events
(effectusd.core.timeline): what the writer leaves out of the events it stores
(``carried_by_rows``), and that the reader (``timeline``) gives back, in the same place, the
very entries an earlier version stored, for every transition the engine makes."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from effectusd.core.enqueue import DispatchSpec
from effectusd.core.settlement import SettlementFacts
from effectusd.core.states import Cause, OutcomeClass
from effectusd.core.timeline import (
    CLAIMED,
    ENQUEUED,
    SETTLED,
    carried_by_rows,
    derived_event_id,
    timeline,
)
from effectusd.core.transition import Completion, Event, HeldClaim, Transition, enqueued_event
from tests.unit.saga_simulator import Dispatch, Simulator, make_plan
from tests.unit.test_core_parallel_properties import PROPERTY, Shape, dags, sequential

T0 = datetime(2026, 1, 1, tzinfo=UTC)
STEP = 2 * "ab" * 16  # a 64-hex-digit stand-in for every hash


def view(entry: Any) -> tuple[Any, ...]:
    """An entry as a reader sees it, but for its id and time."""
    if isinstance(entry, Event):
        entry = vars(entry)
    return (
        entry["kind"],
        entry["effect_id"],
        entry["direction"],
        entry["attempt"],
        entry["from_state"],
        entry["to_state"],
        entry["actor"],
        entry["evidence"],
        dict(entry["detail"]),
    )


class Recorded(Simulator):
    """The simulator's saga written twice: every event stored, as an earlier version did
    (``old``), and as the store writes it now (``rows``: the events it still stores, the
    settlements and enqueues its attempt and outbox rows carry)."""

    def __post_init__(self) -> None:
        self.old: list[tuple[Any, ...]] = []
        self.rows: list[dict[str, Any]] = []
        self.ticks = 0
        self.carried: Any = None
        self.completion: Completion | None = None
        submitted = Event("saga_submitted", to_state="running", actor="client")
        self.old.append(view(submitted))
        self._store(submitted)
        super().__post_init__()

    def _at(self) -> datetime:
        self.ticks += 1
        return T0 + timedelta(milliseconds=self.ticks)

    def _store(self, event: Event) -> None:
        stored = [row["event_id"] for row in self.rows if row["event_id"] is not None]
        self.rows.append({**vars(event), "event_id": len(stored) + 1, "at": self._at()})

    def _insert(self, spec: DispatchSpec) -> None:
        super()._insert(spec)
        if self.carried is None:  # a submit: the outbox row carries its enqueue
            self.old.append(view(enqueued_event(spec, "client")))
            actor: str | None = "client"
        else:
            actor = self.carried.enqueued_by.get((spec.effect_id, spec.direction))
        if actor is not None:
            started = None if self.carried is None else self.carried.started_from
            started_from = (started or {}).get((spec.effect_id, spec.direction))
            follows = None if started_from is None else self.carried.follows
            self.rows.append(
                self._row(self.dispatches[-1], ENQUEUED, None, "queued", actor)
                | {"started_from": started_from, "enqueued_after": follows}
            )

    def _row(
        self, d: Dispatch, kind: str, attempt: int | None, to_state: str, actor: str, **more: Any
    ) -> dict[str, Any]:
        detail = {"idempotency_key": d.spec.idempotency_key, "args_hash": d.spec.args_hash}
        return {
            "event_id": None,
            "kind": kind,
            "effect_id": d.spec.effect_id,
            "direction": d.spec.direction,
            "attempt": attempt,
            "from_state": None,
            "to_state": to_state,
            "actor": actor,
            "evidence": None,
            "detail": detail,
            "at": self._at(),
            "dispatch_id": d.id,
            **more,
        }

    def _settle(self, d: Dispatch, completion: Completion, facts: SettlementFacts) -> None:
        self.completion = completion
        super()._settle(d, completion, facts)

    def _apply(self, d: Dispatch, transition: Transition) -> None:
        assert self.completion is not None
        settles = (self.completion, d.spec.effect_id, d.spec.direction)
        carried = carried_by_rows(transition.events, transition.new_dispatches, settles)
        self.old += [view(event) for event in transition.events]
        if carried.settled is not None:  # the settle statement runs first
            last = max(row["event_id"] or 0 for row in self.rows)
            settled = carried.settled
            self.rows.append(
                self._row(d, SETTLED, settled.attempt, settled.to_state or "", settled.actor)
                | {"from_state": "in_flight", "detail": settled.detail, "settled_after": last}
                | {"settled_step": carried.settled_step and carried.settled_step.to_state}
                | {"settled_saga": carried.settled_saga and carried.settled_saga.to_state}
            )
        self.carried = carried
        super()._apply(d, transition)  # the inserts
        for event in carried.events:
            self._store(event)
        self.carried = None

    def read(self) -> list[tuple[Any, ...]]:
        rows = sorted(self.rows, key=lambda r: (r["event_id"] is None, r["event_id"] or 0))
        return [view(entry) for entry in timeline(rows)]


def assert_read_as_stored(shape: Shape, seed: int, cancels: bool = False) -> None:
    saga = Recorded(make_plan(shape), random.Random(seed), cancels=cancels)
    saga.run()
    assert saga.read() == saga.old
    stored = [row for row in saga.rows if row["event_id"] is not None]
    assert not [row for row in stored if row["kind"] == ENQUEUED]  # all carried by rows
    assert len(stored) < len(saga.old)


@PROPERTY
@given(dags(), st.integers(0, 2**32), st.booleans())
def test_every_parallel_saga_reads_as_if_every_event_were_stored(
    shape: Shape, seed: int, cancels: bool
) -> None:
    assert_read_as_stored(shape, seed, cancels)


@PROPERTY
@given(sequential(6), st.integers(0, 2**32))
def test_every_sequential_saga_reads_as_if_every_event_were_stored(shape: Shape, seed: int) -> None:
    assert_read_as_stored(shape, seed)


# -- the writer's rules ------------------------------------------------------------------------

SPEC = DispatchSpec(
    "s" * 64, "b", "forward", "default", "x", "d", "pay", STEP, "at_most_once", "POST", "/p",
    "{}", STEP, STEP, [], 1000, 3,
)  # fmt: skip
DONE = Completion.answered(HeldClaim(7, 2, "t"), OutcomeClass.SUCCESS, status_code=200)
SETTLES = (DONE, "a", "forward")


def settlement(**changes: Any) -> Event:
    detail = {"outcome": "success", "settled_by": "executor", "status_code": 200, "error": None}
    fields: dict[str, Any] = {
        "kind": SETTLED, "effect_id": "a", "direction": "forward", "attempt": 2,
        "from_state": "in_flight", "to_state": "succeeded", "actor": "engine", "detail": detail,
    }  # fmt: skip
    return Event(**(fields | changes))


START = Event("step_state", "b", from_state="pending", to_state="in_progress")


def test_the_attempt_row_carries_the_settlement_that_takes_its_dispatch_out_of_flight() -> None:
    events = [settlement(), Event("step_state", "a"), START, enqueued_event(SPEC, "engine")]
    carried = carried_by_rows(events, [SPEC], SETTLES)
    assert carried.settled is events[0]
    assert carried.enqueued_by == {("b", "forward"): "engine"}
    assert carried.events == events[1:3]


def test_the_outbox_rows_carry_the_enqueues_of_a_sagas_first_dispatches() -> None:
    first = replace(SPEC, effect_id="a")
    submitted = Event("saga_submitted", to_state="running", actor="user:ann")
    events = [submitted, enqueued_event(first, "user:ann"), enqueued_event(SPEC, "user:ann")]
    carried = carried_by_rows(events, [first, SPEC])
    assert carried.events == [submitted]
    assert carried.enqueued_by == {("a", "forward"): "user:ann", ("b", "forward"): "user:ann"}


def test_what_the_rows_cannot_give_back_the_same_stays_a_stored_event() -> None:
    """A second settlement of an attempt (a late answer, an operator's resolution: the row is
    settled already), a settlement with evidence, one whose detail is not the completion's,
    an attempt row left alone, an enqueue not written right after its step's start."""
    late = settlement(from_state="blocked_unknown")
    assert carried_by_rows([late], [], SETTLES).settled is None
    resolved = replace(DONE, cause=Cause.RESOLVED, operator_evidence="checked")
    assert carried_by_rows([settlement()], [], (resolved, "a", "forward")).settled is None
    assert carried_by_rows([settlement(attempt=1)], [], SETTLES).settled is None
    assert carried_by_rows([settlement()], [], None).settled is None
    assert carried_by_rows([settlement()], [], (DONE, "b", "forward")).settled is None
    enqueue = enqueued_event(SPEC, "engine")
    assert carried_by_rows([Event("saga_state"), enqueue], [SPEC]).events == [
        Event("saga_state"),
        enqueue,
    ]
    assert carried_by_rows([START, enqueue], []).events == [START, enqueue]  # no such row
    other = replace(enqueue, detail={"idempotency_key": "k", "args_hash": STEP})
    assert carried_by_rows([START, other], [SPEC]).enqueued_by == {}


# -- the reader's places -----------------------------------------------------------------------


def stored(event_id: int, ms: int, kind: str, effect: str | None = None, **more: Any) -> dict:
    return {
        "event_id": event_id, "effect_id": effect, "direction": "forward" if effect else None,
        "attempt": None, "kind": kind, "from_state": None, "to_state": None, "actor": "engine",
        "evidence": None, "detail": {}, "at": T0 + timedelta(milliseconds=ms),
        "dispatch_id": None, "lease_expires_at": None, "settled_after": None, **more,
    }  # fmt: skip


def row(kind: str, dispatch_id: int, effect: str, ms: int, **more: Any) -> dict[str, Any]:
    """A row select_saga_events reads from an attempt or outbox row (no event_id)."""
    return stored(0, ms, kind, effect, dispatch_id=dispatch_id, **more) | {"event_id": None}


def test_the_entries_read_from_rows_are_the_stored_events_they_stand_for() -> None:
    detail = {"outcome": "success", "settled_by": "executor", "status_code": 200, "error": None}
    rows = [
        stored(1, 0, "saga_submitted", to_state="running", actor="client"),
        row(ENQUEUED, 7, "a", 1, to_state="queued", actor="client", detail={"z": 1, "a": 2}),
        row(SETTLED, 7, "a", 30, attempt=1, from_state="in_flight", to_state="succeeded",
            detail=detail, settled_after=1),
    ]  # fmt: skip
    [submitted, enqueued, settled] = timeline(rows)
    assert enqueued == {
        "event_id": derived_event_id(7, 0, ENQUEUED),
        "effect_id": "a",
        "direction": "forward",
        "attempt": None,
        "kind": ENQUEUED,
        "from_state": None,
        "to_state": "queued",
        "actor": "client",
        "evidence": None,
        "detail": {"a": 2, "z": 1},  # written at submit as canonical JSON: keys sorted
        "at": submitted["at"],  # with the submission, as it was written
    }
    assert list(enqueued["detail"]) == ["a", "z"]
    assert settled["event_id"] == derived_event_id(7, 1, SETTLED)
    assert view(settled) == (SETTLED, "a", "forward", 1, "in_flight", "succeeded", "engine",
                             None, detail)  # fmt: skip
    assert settled["at"] == T0 + timedelta(milliseconds=30)  # completed_at
    ids = {
        derived_event_id(7, 0, ENQUEUED),
        derived_event_id(7, 1),
        derived_event_id(7, 1, SETTLED),
    }
    assert len(ids) == 3 and max(ids) < 0


def test_a_settlement_goes_after_what_was_stored_before_it_and_an_enqueue_after_its_start() -> None:
    """Settlements at one place (transactions that stored nothing else) go by completed_at;
    they follow the enqueues written with the event before them; an enqueue goes right after
    the event that started its step (forward: in_progress; compensation: compensating)."""
    rows = [
        stored(1, 0, "saga_submitted"),
        stored(4, 10, "step_state", "b", to_state="in_progress"),
        stored(5, 10, "step_state", "c", to_state="in_progress"),
        stored(9, 40, "step_state", "b", to_state="compensating"),
        row(ENQUEUED, 1, "a", 0),
        row(ENQUEUED, 2, "b", 9),
        row(ENQUEUED, 3, "c", 9),
        row(ENQUEUED, 4, "b", 39, direction="compensation"),
        row(SETTLED, 3, "c", 21, attempt=1, settled_after=5),
        row(SETTLED, 2, "b", 20, attempt=1, settled_after=5),
        row(SETTLED, 1, "a", 5, attempt=1, settled_after=1),
    ]
    assert [(e["kind"], e["effect_id"], e["attempt"]) for e in timeline(rows)] == [
        ("saga_submitted", None, None),
        (ENQUEUED, "a", None),
        (SETTLED, "a", 1),
        ("step_state", "b", None),
        (ENQUEUED, "b", None),
        ("step_state", "c", None),
        (ENQUEUED, "c", None),
        (SETTLED, "b", 1),
        (SETTLED, "c", 1),
        ("step_state", "b", None),
        (ENQUEUED, "b", None),
    ]


def test_a_claim_is_placed_after_the_enqueue_or_settlement_that_made_it_due() -> None:
    claim = {"lease_expires_at": T0, "from_state": None, "to_state": "in_flight"}
    rows = [
        stored(1, 0, "saga_submitted"),
        stored(2, 50, "step_state", "b", to_state="in_progress"),
        row(ENQUEUED, 1, "a", 0),
        row(SETTLED, 1, "a", 20, attempt=1, to_state="retry_wait", settled_after=1),
        row("dispatch_claimed", 1, "a", 10, attempt=1, **claim),
        row("dispatch_claimed", 1, "a", 30, attempt=2, **claim),
    ]
    entries = [(e["kind"], e["attempt"], e["from_state"]) for e in timeline(rows)]
    assert entries == [
        ("saga_submitted", None, None),
        (ENQUEUED, None, None),
        ("dispatch_claimed", 1, "queued"),
        (SETTLED, 1, None),
        ("dispatch_claimed", 2, "retry_wait"),
        ("step_state", None, None),
    ]


# -- a chain's step moves (migration 10015) ------------------------------------------------

DONE_A = Event("step_state", "a", from_state="in_progress", to_state="succeeded")


def test_a_chain_step_that_succeeds_carries_both_its_step_moves_on_its_rows() -> None:
    """[settled a, a succeeded, b started, b enqueued]: nothing of it is stored."""
    events = [settlement(), DONE_A, START, enqueued_event(SPEC, "engine")]
    carried = carried_by_rows(events, [SPEC], SETTLES)
    assert carried.events == []
    assert (carried.settled, carried.settled_step) == (events[0], DONE_A)
    assert carried.started_from == {("b", "forward"): "pending"}
    assert carried.follows == derived_event_id(7, 2, SETTLED)


def test_a_step_move_the_rows_cannot_place_as_it_was_stays_stored() -> None:
    """A start after a stored event of the same transaction, a fan-out's starts (two new
    rows), a start whose settlement is not carried, a move with another actor or detail."""
    enqueue = enqueued_event(SPEC, "engine")
    between = Event("saga_state", from_state="running", to_state="compensating")
    carried = carried_by_rows([settlement(), DONE_A, between, START, enqueue], [SPEC], SETTLES)
    assert carried.events == [between, START]
    assert carried.started_from == {} and carried.settled_step == DONE_A
    other = replace(SPEC, effect_id="c")
    fan_out = [settlement(), DONE_A, START, enqueue, replace(START, effect_id="c")]
    fan_out.append(enqueued_event(other, "engine"))
    assert carried_by_rows(fan_out, [SPEC, other], SETTLES).started_from == {}
    assert carried_by_rows([START, enqueue], [SPEC]).started_from == {}
    by_reclaim = replace(DONE_A, actor="daemon-2")
    assert carried_by_rows([settlement(), by_reclaim], [], SETTLES).settled_step is None
    with_detail = replace(DONE_A, detail={"note": 1})
    assert carried_by_rows([settlement(), with_detail], [], SETTLES).settled_step is None


def test_a_chains_step_moves_read_back_after_their_settlement_before_the_next_enqueue() -> None:
    settled_id = derived_event_id(1, 1, SETTLED)
    rows = [
        stored(1, 0, "saga_submitted"),
        stored(2, 50, "saga_state", to_state="completed"),
        row(ENQUEUED, 1, "a", 0),
        row(SETTLED, 1, "a", 20, attempt=1, settled_after=1, settled_step="succeeded"),
        row(ENQUEUED, 2, "b", 21, started_from="pending", enqueued_after=settled_id),
        row(SETTLED, 2, "b", 40, attempt=1, settled_after=1, settled_step="succeeded"),
    ]
    entries = timeline(rows)
    assert [(e["kind"], e["effect_id"], e["from_state"], e["to_state"]) for e in entries] == [
        ("saga_submitted", None, None, None),
        (ENQUEUED, "a", None, None),
        (SETTLED, "a", None, None),
        ("step_state", "a", "in_progress", "succeeded"),
        ("step_state", "b", "pending", "in_progress"),
        (ENQUEUED, "b", None, None),
        (SETTLED, "b", None, None),
        ("step_state", "b", "in_progress", "succeeded"),
        ("saga_state", None, None, "completed"),
    ]
    ids = [e["event_id"] for e in entries]
    assert len(set(ids)) == len(ids)  # every derived entry has its own id


COMPLETED = Event("saga_state", from_state="running", to_state="completed")


def test_the_success_that_completes_a_saga_carries_the_completion_after_its_step_move() -> None:
    """[settled a, a succeeded, saga completed]: nothing of it is stored (migration 10020)."""
    carried = carried_by_rows([settlement(), DONE_A, COMPLETED], [], SETTLES)
    assert (carried.settled_step, carried.settled_saga) == (DONE_A, COMPLETED)
    assert carried.events == []


def test_a_saga_move_the_row_cannot_give_back_the_same_stays_stored() -> None:
    """A completion with a reason (an operator's resolution says who and what), by another
    actor, with no step move carried before it, or beside a new dispatch; any other end."""
    resolved = replace(COMPLETED, detail={"reason": "resolved by ann as committed"})
    by_reclaim = replace(COMPLETED, actor="daemon-2")
    failed = Event("saga_state", from_state="running", to_state="failed")
    for end in (resolved, by_reclaim, failed):
        carried = carried_by_rows([settlement(), DONE_A, end], [], SETTLES)
        assert (carried.settled_saga, carried.events) == (None, [end])
    alone = carried_by_rows([settlement(), COMPLETED], [], SETTLES)
    assert (alone.settled_saga, alone.events) == (None, [COMPLETED])
    enqueue = enqueued_event(SPEC, "engine")
    beside = carried_by_rows([settlement(), DONE_A, COMPLETED, START, enqueue], [SPEC], SETTLES)
    assert beside.settled_saga is None and COMPLETED in beside.events


def test_a_carried_completion_reads_back_last_with_its_own_id() -> None:
    rows = [
        stored(1, 0, "saga_submitted"),
        row(ENQUEUED, 1, "a", 0),
        row(SETTLED, 1, "a", 20, attempt=1, settled_after=1, settled_step="succeeded",
            settled_saga="completed"),
        row(CLAIMED, 1, "a", 10, attempt=1, lease_expires_at=T0),
    ]  # fmt: skip
    entries = timeline(rows)
    assert [(e["kind"], e["from_state"], e["to_state"]) for e in entries] == [
        ("saga_submitted", None, None),
        (ENQUEUED, None, None),
        (CLAIMED, "queued", "in_flight"),
        (SETTLED, None, None),
        ("step_state", "in_progress", "succeeded"),
        ("saga_state", "running", "completed"),
    ]
    completion = entries[-1]
    assert completion["actor"] == "engine" and completion["at"] == entries[3]["at"]
    ids = [e["event_id"] for e in entries[1:]]
    assert len(set(ids)) == len(ids) and all(i < 0 for i in ids)  # read from rows, each its own

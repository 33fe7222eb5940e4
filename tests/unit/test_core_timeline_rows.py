"""The enqueue and settlement entries a saga's rows carry instead of stored events
(effectusd.core.timeline): the builder says which entries its rows carry (``Transition``'s
``settled``, ``enqueued_by``, ``started_from``), the writer fills their columns and the reader
(``timeline``) gives back, in the same place, every entry the builder would have stored, for
every transition the engine makes."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from effectusd.core.enqueue import DispatchSpec
from effectusd.core.settlement import SettlementFacts
from effectusd.core.states import OutcomeClass
from effectusd.core.timeline import (
    CLAIMED,
    ENQUEUED,
    ON_ATTEMPT,
    ON_OUTBOX,
    SETTLED,
    attempt_columns,
    derived_event_id,
    outbox_columns,
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
    """The simulator's saga written twice: every entry a stored event (``old``: the builder
    with ``carry_in_rows`` off), and as the store writes it now (``rows``: the events the
    transition stores, the entries its attempt and outbox rows carry, their columns filled
    by the writer's ``attempt_columns`` and ``outbox_columns``)."""

    def __post_init__(self) -> None:
        self.old: list[tuple[Any, ...]] = []
        self.rows: list[dict[str, Any]] = []
        self.ticks = 0
        self.carrier: Transition | None = None
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
        if self.carrier is None:  # a submit: the outbox row carries its enqueue
            self.old.append(view(enqueued_event(spec, "client")))
            columns = {"enqueued_by": "client", "started_from": None, "enqueued_after": None}
        else:
            assert self.completion is not None
            columns = {}
            follows = derived_event_id(
                self.completion.dispatch_id, self.completion.attempt, SETTLED
            )
            outbox_columns(self.carrier, follows, columns)
        if columns["enqueued_by"] is not None:
            self.rows.append(
                self._row(self.dispatches[-1], ENQUEUED, None, "queued", columns["enqueued_by"])
                | columns
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

    def _apply(self, d: Dispatch, transition: Transition, every: list[Event]) -> None:
        completion = self.completion
        assert completion is not None
        self.old += [view(event) for event in every]
        assert_split(transition, every)
        columns: dict[str, Any] = {}
        attempt_columns(transition.settled, columns)
        if columns["settled_to"] is not None:  # the settle statement runs first
            last = max(row["event_id"] or 0 for row in self.rows)
            detail = {
                "outcome": completion.outcome.value,
                "settled_by": completion.cause.settled_by.value,
                "status_code": completion.status_code,
                "error": completion.error,
            }
            self.rows.append(
                self._row(d, SETTLED, completion.attempt, columns["settled_to"], "")
                | {"from_state": "in_flight", "detail": detail, "settled_after": last}
                | {"actor": columns["settled_actor"]}
                | columns
            )
        self.carrier = transition
        super()._apply(d, transition, every)  # the inserts
        for event in transition.events:
            self._store(event)
        self.carrier = None

    def read(self) -> list[tuple[Any, ...]]:
        rows = sorted(self.rows, key=lambda r: (r["event_id"] is None, r["event_id"] or 0))
        return [view(entry) for entry in timeline(rows)]


def assert_split(transition: Transition, every: list[Event]) -> None:
    """The transition's stored events, in order, plus the entries its rows carry (counted by
    the table's columns) are its every entry."""
    attempt: dict[str, Any] = {}
    attempt_columns(transition.settled, attempt)
    carried = sum(attempt[c.column] is not None for c in ON_ATTEMPT)
    for _ in transition.new_dispatches:
        outbox: dict[str, Any] = {}
        outbox_columns(transition, 0, outbox)
        carried += sum(outbox[c.column] is not None for c in ON_OUTBOX)
    assert len(transition.events) + carried == len(every)
    kept = iter(every)
    assert all(any(event == other for other in kept) for event in transition.events)


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


def stored(event_id: int, ms: int, kind: str, effect: str | None = None, **more: Any) -> dict:
    return {
        "event_id": event_id, "effect_id": effect, "direction": "forward" if effect else None,
        "attempt": None, "kind": kind, "from_state": None, "to_state": None, "actor": "engine",
        "evidence": None, "detail": {}, "at": T0 + timedelta(milliseconds=ms),
        "dispatch_id": None, "lease_expires_at": None, "settled_after": None, **more,
    }  # fmt: skip


def row(kind: str, dispatch_id: int, effect: str, ms: int, **more: Any) -> dict[str, Any]:
    """A row select_saga_events reads from an attempt or outbox row (no event_id); a
    settlement's or an enqueue's carries its entry (its settled_to, its enqueued_by)."""
    carried = {SETTLED: {"to_state": "succeeded"}, ENQUEUED: {"to_state": "queued"}}
    more = carried.get(kind, {}) | more
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
        (ENQUEUED, "a", None, "queued"),
        (SETTLED, "a", None, "succeeded"),
        ("step_state", "a", "in_progress", "succeeded"),
        ("step_state", "b", "pending", "in_progress"),
        (ENQUEUED, "b", None, "queued"),
        (SETTLED, "b", None, "succeeded"),
        ("step_state", "b", "in_progress", "succeeded"),
        ("saga_state", None, None, "completed"),
    ]
    ids = [e["event_id"] for e in entries]
    assert len(set(ids)) == len(ids)  # every derived entry has its own id


COMPLETED = Event("saga_state", from_state="running", to_state="completed")


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
        (ENQUEUED, None, "queued"),
        (CLAIMED, "queued", "in_flight"),
        (SETTLED, None, "succeeded"),
        ("step_state", "in_progress", "succeeded"),
        ("saga_state", "running", "completed"),
    ]
    completion = entries[-1]
    assert completion["actor"] == "engine" and completion["at"] == entries[3]["at"]
    ids = [e["event_id"] for e in entries[1:]]
    assert len(set(ids)) == len(ids) and all(i < 0 for i in ids)  # read from rows, each its own

"""The timeline a saga view shows: the stored events (``effectus_saga_events``) and the entries
read from rows the pipeline writes anyway, which append no event.

These entries say nothing their rows do not, so they are read from them:

* ``dispatch_enqueued``: the outbox row (step, direction, idempotency key, argument hash;
  ``enqueued_by`` says who: the client at submit, the engine, an operator). An enqueue is
  written with the event that starts its step (``step_state`` to in_progress, or to
  compensating), right after it in one transaction, or with ``saga_submitted`` for a saga's
  first dispatches: the entry goes right after that event, with its time (the row's
  ``created_at`` is a few microseconds earlier, in the same transaction), first dispatches
  in dispatch_id order;
* ``attempt_settled`` of the settlement that moves a dispatch out of in_flight: the attempt
  row (outcome, settled_by, status code, error, ``completed_at``; ``settled_to``, the state
  the dispatch moved to; ``settled_actor``, the engine or a daemon's reclaim). It is the first
  entry of its transaction, written before its events: it goes after the saga's last stored
  event when it settled (``settled_after``), before every later one, after the enqueues of
  that event's transaction; settlements at one place go by ``completed_at``, dispatch,
  attempt. A second settlement of an attempt (a late answer that settles a block, an
  operator's resolution) writes nothing on the row and stays a stored event;
* the two step moves of a chain (migration 10015): ``step_state`` of the step a settlement
  completes (forward: in_progress to succeeded; compensation: compensating to compensated),
  on that attempt row (``settled_step``), right after the settlement; and ``step_state`` of
  the step the same transaction starts, on the new outbox row (``started_from``, the step's
  state before), right before that step's enqueue, both right after the settlement
  (``enqueued_after``: the settlement's entry id). Carried only where nothing the
  transaction stores comes between them (a transition that enqueues one dispatch and stores
  no event before it: every step of a sequential plan that succeeds but the last); anything
  else stays stored, and so does every start that anchors an enqueue as above;
* the saga's completion (migration 10020): ``saga_state`` from running to completed, on the
  attempt row of the settlement whose success completes it (``settled_saga``), right after
  the step move that row carries. Carried only where it says nothing else (no reason, the
  settlement's actor) and follows that step move; any other saga move stays stored;
* ``dispatch_claimed``: the attempt row the claim opens (``with_claims``). A claim is placed
  by time among the entries of other dispatches. A settlement's time is its row's
  ``completed_at``, a few microseconds before its transaction's events are written, where its
  stored event's was that insert's: in a parallel saga, a claim of another branch whose
  transaction began in between shows after that settlement (and before the rest of its
  transaction), where it showed before it.

The transition builder (``effectusd.core.next_step``) says which of its moves the rows
carry, where it makes each (``Transition.settled``, ``enqueued_by``, ``started_from``): only
an entry the rows give back the same (kind, step, direction, attempt, states, actor, evidence
and detail) at the same place; anything else is a stored event. Which column carries which
entry is said once, in ``ON_ATTEMPT`` and ``ON_OUTBOX`` below: the writer fills the columns
from them (``attempt_columns``, ``outbox_columns``) and the reader makes the entries. A row
written by an earlier version has NULL where
an entry would be read (``settled_to``, ``enqueued_by``) and its stored event instead, so
nothing shows twice; for claims, a stored ``dispatch_claimed`` is shown instead.

A derived entry has no stored ``event_id``: it gets a negative one, unique in the saga and the
same on every read (for attempts below 65535 and dispatch ids below 2**36):
``-(dispatch_id * 65536 + attempt)`` for a claim, ``-(dispatch_id * 65536)`` for an enqueue,
``-(dispatch_id * 65536 + 65535)`` for the start of its step,
``-(2**52 + dispatch_id * 65536 + attempt)`` for a settlement and
``-(2**52 + dispatch_id * 65536)`` for the step move it carries (a dispatch succeeds once) and
``-(2**52 + dispatch_id * 65536 + 65535)`` for the saga's completion it carries.
Stored events keep their own (positive, ascending along the timeline). Nothing pages by
``event_id``; a reader that did would page the stored events.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from effectusd.core.frozen import frozen
from effectusd.core.states import Direction, DispatchState, SagaState, StepState
from effectusd.core.transition import Settled

__all__ = [
    "CLAIMED",
    "COMPLETES",
    "ENQUEUED",
    "ON_ATTEMPT",
    "ON_OUTBOX",
    "SETTLED",
    "SETTLED_TO",
    "Carries",
    "Submitted",
    "attempt_columns",
    "derived_event_id",
    "outbox_columns",
    "timeline",
    "with_claims",
]

CLAIMED = "dispatch_claimed"
SETTLED = "attempt_settled"
ENQUEUED = "dispatch_enqueued"
STARTED = "step_state"
STEP_MOVED = STARTED  # a step move of any kind is a step_state event
SUBMITTED = "saga_submitted"
SAGA_MOVED = "saga_state"
_DUE = ("queued", "retry_wait")  # the states a claim takes a row from (claim_ready.sql)
_ATTEMPT_SPAN = 65536
_START_SLOT = _ATTEMPT_SPAN - 1  # the enqueue's attempt slot is 0, its step start's the last
_SETTLED_BASE = 2**52
# the step state the event that starts a dispatch's step moves it to, by direction
_STARTS = {
    Direction.FORWARD.value: StepState.IN_PROGRESS.value,
    Direction.COMPENSATION.value: StepState.COMPENSATING.value,
}
# the step move a dispatch's success makes, by direction: (from, to)
COMPLETES = {
    Direction.FORWARD: (StepState.IN_PROGRESS, StepState.SUCCEEDED),
    Direction.COMPENSATION: (StepState.COMPENSATING, StepState.COMPENSATED),
}
# the states a settlement moves a dispatch to (the CHECK on settled_to)
SETTLED_TO = frozenset(DispatchState) - {DispatchState.QUEUED, DispatchState.IN_FLIGHT}


def derived_event_id(dispatch_id: int, attempt: int, kind: str = CLAIMED) -> int:
    """The ``event_id`` of the entry of ``kind`` derived from dispatch ``dispatch_id``'s rows
    (``attempt``: the attempt row's; 0 for the enqueue and the step moves)."""
    base = dispatch_id * _ATTEMPT_SPAN + attempt
    return -(_SETTLED_BASE + base) if kind == SETTLED else -base


def _start_event_id(dispatch_id: int) -> int:
    return -(dispatch_id * _ATTEMPT_SPAN + _START_SLOT)


def _saga_end_event_id(dispatch_id: int) -> int:
    return -(_SETTLED_BASE + dispatch_id * _ATTEMPT_SPAN + _START_SLOT)


# -- which column carries which entry: the one table the writer and the reader read ----------


@frozen
class Carries:
    """One timeline entry a row carries: the ``column`` the writer fills from the Transition's
    ``field`` (``Settled``'s on the attempt row, the Transition's own on an outbox row), NULL
    where the row carries none, and the reader makes the entry of ``kind`` from the
    select_saga_events row (where the value reads as ``read_as``) with ``entry``."""

    column: str
    kind: str
    field: str
    read_as: str
    entry: Callable[[Mapping[str, Any]], dict[str, Any]]


def _settlement(row: Mapping[str, Any]) -> dict[str, Any]:
    return _entry(row, row["attempt"], row["at"], SETTLED)


def _settled_step(row: Mapping[str, Any]) -> dict[str, Any]:
    moved = COMPLETES[row["direction"]][0].value, row["settled_step"]
    return _move(row, derived_event_id(row["dispatch_id"], 0, SETTLED), moved)


def _settled_saga(row: Mapping[str, Any]) -> dict[str, Any]:
    ended = SagaState.RUNNING.value, row["settled_saga"]
    return _move(row, _saga_end_event_id(row["dispatch_id"]), ended, SAGA_MOVED)


def _started(row: Mapping[str, Any]) -> dict[str, Any]:
    moved = row["started_from"], _STARTS[row["direction"]]
    return _move(row, _start_event_id(row["dispatch_id"]), moved)


def _enqueue(row: Mapping[str, Any]) -> dict[str, Any]:
    return _entry(row, 0, row["at"], ENQUEUED)


# In timeline order: a settlement, the step move its success makes, the saga's completion; a
# chain's start of the step, that step's enqueue. ``settled_actor`` (the settlement's actor,
# which the entries on the attempt row share) and ``enqueued_after`` (the settlement a chain's
# start follows) say where, not what.
ON_ATTEMPT = (
    Carries("settled_to", SETTLED, "to", "to_state", _settlement),
    Carries("settled_step", STEP_MOVED, "step", "settled_step", _settled_step),
    Carries("settled_saga", SAGA_MOVED, "saga", "settled_saga", _settled_saga),
)
ON_OUTBOX = (
    Carries("started_from", STEP_MOVED, "started_from", "started_from", _started),
    Carries("enqueued_by", ENQUEUED, "enqueued_by", "actor", _enqueue),
)


def attempt_columns(settled: Settled | None, params: dict[str, Any]) -> None:
    """Fill the settle_attempt row ``params`` with the entries ``settled`` carries."""
    params["settled_actor"] = None if settled is None else settled.actor
    for carries in ON_ATTEMPT:
        value = None if settled is None else getattr(settled, carries.field)
        params[carries.column] = None if value is None else str(value)


class CarriesEnqueues(Protocol):
    """What the new outbox rows of a Transition, or of a submission (``Submitted``), carry."""

    @property
    def enqueued_by(self) -> str | None: ...

    @property
    def started_from(self) -> StepState | None: ...


def outbox_columns(carrier: CarriesEnqueues, follows: int | None, params: dict[str, Any]) -> None:
    """Fill the insert_dispatch row ``params`` with the entries ``carrier`` (a Transition, or a
    submission's ``Carried``) says its new outbox row carries; ``follows``: the id of the
    settlement entry a carried start goes after."""
    for carries in ON_OUTBOX:
        value = getattr(carrier, carries.field)
        params[carries.column] = None if value is None else str(value)
    params["enqueued_after"] = None if params["started_from"] is None else follows


def carried_entries(row: Mapping[str, Any], table: Sequence[Carries]) -> list[dict[str, Any]]:
    """The entries a select_saga_events row carries, in timeline order."""
    return [carries.entry(row) for carries in table if row.get(carries.read_as) is not None]


@frozen
class Submitted:
    """What a submission's new outbox rows carry: each its enqueue by the submitter."""

    enqueued_by: str
    started_from: StepState | None = None


# -- reading: the entries placed among the stored events ---------------------------------------


def timeline(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The timeline of ``select_saga_events`` rows: the stored events (``event_id`` set) in
    ``event_id`` order, with the rows' entries (``event_id`` NULL) made entries and placed as
    the module docstring says."""
    events = [row for row in rows if row["event_id"] is not None]
    derived = [row for row in rows if row["event_id"] is None]
    placed = _with_rows(
        events,
        [row for row in derived if row["kind"] == ENQUEUED],
        [row for row in derived if row["kind"] == SETTLED],
    )
    return with_claims([*placed, *(row for row in derived if row["kind"] == CLAIMED)])


def _with_rows(
    events: Sequence[Mapping[str, Any]],
    enqueues: Sequence[Mapping[str, Any]],
    settlements: Sequence[Mapping[str, Any]],
) -> list[Mapping[str, Any]]:
    """The stored events with the enqueue and settlement entries in their places."""
    after: dict[int, list[Mapping[str, Any]]] = {}  # by the index of the event they follow
    follow: dict[int, list[Mapping[str, Any]]] = {}  # by the settlement entry they follow
    for row in sorted(enqueues, key=lambda r: r["dispatch_id"]):
        if row.get("enqueued_after") is not None:
            follow.setdefault(row["enqueued_after"], []).append(row)
            continue
        index = _started_by(events, row)
        [entry] = carried_entries(row, ON_OUTBOX)  # its enqueue: it carries no start
        if index >= 0:
            entry["at"] = events[index]["at"]
        if index < 0 or events[index]["kind"] == SUBMITTED:
            # the submit wrote its events' detail as canonical JSON (keys sorted); the
            # engine's keep the order they were built in (SQLite keeps it, jsonb sorts)
            entry["detail"] = dict(sorted(entry["detail"].items()))
        after.setdefault(index, []).append(entry)
    ids = [event["event_id"] for event in events]
    for row in sorted(settlements, key=lambda r: (r["at"], r["dispatch_id"], r["attempt"])):
        index = bisect_right(ids, row["settled_after"]) - 1
        group = after.setdefault(index, [])
        group.extend(carried_entries(row, ON_ATTEMPT))
        for enqueue in follow.pop(
            derived_event_id(row["dispatch_id"], row["attempt"], SETTLED), []
        ):
            group.extend(carried_entries(enqueue, ON_OUTBOX))
    merged = list(after.get(-1, []))
    for index, event in enumerate(events):
        merged.append(event)
        merged.extend(after.get(index, []))
    return merged


def _started_by(events: Sequence[Mapping[str, Any]], enqueue: Mapping[str, Any]) -> int:
    """The index of the event an enqueue was written with: the one that started its step,
    else (a first dispatch) the submission; -1 if neither is stored."""
    start = _STARTS.get(enqueue["direction"])
    submitted = -1
    for index, event in enumerate(events):
        if event["kind"] == STARTED and event["effect_id"] == enqueue["effect_id"]:
            if event["to_state"] == start:
                return index
        elif event["kind"] == SUBMITTED and submitted < 0:
            submitted = index
    return submitted


def _move(
    row: Mapping[str, Any], event_id: int, moved: tuple[str, str], kind: str = STEP_MOVED
) -> dict[str, Any]:
    """The move a settlement's or an enqueue's row carries (``moved``: from, to): its step's,
    or with ``kind`` SAGA_MOVED the saga's (no step named)."""
    return {
        "event_id": event_id,
        "effect_id": row["effect_id"] if kind == STEP_MOVED else None,
        "direction": None,
        "attempt": None,
        "kind": kind,
        "from_state": moved[0],
        "to_state": moved[1],
        "actor": row["actor"],
        "evidence": None,
        "detail": {},
        "at": row["at"],
    }


def _entry(row: Mapping[str, Any], attempt: int, at: datetime, kind: str) -> dict[str, Any]:
    return {
        "event_id": derived_event_id(row["dispatch_id"], attempt, kind),
        "effect_id": row["effect_id"],
        "direction": row["direction"],
        "attempt": row["attempt"],
        "kind": kind,
        "from_state": row["from_state"],
        "to_state": row["to_state"],
        "actor": row["actor"],
        "evidence": None,
        "detail": row["detail"],
        "at": at,
    }


def with_claims(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The timeline of the entries in ``rows`` that have an ``event_id`` (in order), with the
    claim row of every attempt (``event_id`` NULL) that has no stored claim event, each made
    an entry and placed: after the entry that made the dispatch due for this attempt (its
    enqueue, the settlement of the attempt before, an operator's retry: the latest one of the
    same dispatch moving it to ``queued`` or ``retry_wait`` before any entry of this attempt
    or a later one; its ``to_state`` is the claim's ``from_state``), before every entry of
    the same dispatch about this attempt or a later one, and between those two, in time: after
    every entry at or before ``claimed_at`` (the claim transaction's start; for a claim made
    where its dispatch is enqueued, the row's ``created_at``). Claims at one place go by
    ``claimed_at``, dispatch, attempt."""
    events = [row for row in rows if row["event_id"] is not None]
    stored = {
        (e["effect_id"], e["direction"], e["attempt"]) for e in events if e["kind"] == CLAIMED
    }
    placed: list[tuple[int, datetime, int, int, dict[str, Any]]] = []
    for row in rows:
        key = (row["effect_id"], row["direction"], row["attempt"])
        if row["event_id"] is not None or key in stored:
            continue  # an entry; or a claim an earlier version stored as one
        position, from_state = _place(events, row)
        entry = {
            "event_id": derived_event_id(row["dispatch_id"], row["attempt"]),
            "effect_id": row["effect_id"],
            "direction": row["direction"],
            "attempt": row["attempt"],
            "kind": CLAIMED,
            "from_state": from_state,
            "to_state": "in_flight",
            "actor": row["actor"],  # the lease owner
            "evidence": None,
            "detail": {"lease_expires_at": row["lease_expires_at"].isoformat()},
            "at": row["at"],  # claimed_at
        }
        placed.append((position, row["at"], row["dispatch_id"], row["attempt"], entry))
    placed.sort(key=lambda p: p[:4])
    merged: list[Mapping[str, Any]] = []
    taken = 0
    for position, *_, entry in placed:
        merged.extend(events[taken:position])
        taken = position
        merged.append(entry)
    merged.extend(events[taken:])
    return merged


def _place(events: Sequence[Mapping[str, Any]], claim: Mapping[str, Any]) -> tuple[int, str]:
    """Where ``claim`` goes (the index of the entry it comes before) and the state it took
    its dispatch from."""
    effect_id, direction, attempt = claim["effect_id"], claim["direction"], claim["attempt"]
    after, before = -1, len(events)
    from_state = "queued" if attempt == 1 else "retry_wait"  # only if no entry says (none lost)
    for index, event in enumerate(events):
        if event["effect_id"] != effect_id or event["direction"] != direction:
            continue
        if event["attempt"] is not None and event["attempt"] >= attempt:
            before = index
            break
        if event["to_state"] in _DUE:
            after, from_state = index, event["to_state"]
    position = after + 1
    while position < before and events[position]["at"] <= claim["at"]:
        position += 1
    return position, from_state

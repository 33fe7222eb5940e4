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

The writer (``carried_by_rows``) leaves out of the stored events only an entry the rows give
back the same (kind, step, direction, attempt, states, actor, evidence and detail) at the
same place; anything else stays stored. A row written by an earlier version has NULL where
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
from collections.abc import Mapping, Sequence
from dataclasses import field
from datetime import datetime
from typing import Any

from effectusd.core.enqueue import DispatchSpec
from effectusd.core.frozen import frozen
from effectusd.core.states import Direction, DispatchState, SagaState, StepState
from effectusd.core.transition import Completion, Event, enqueued_event, settled_event

__all__ = [
    "CLAIMED",
    "ENQUEUED",
    "SETTLED",
    "Carried",
    "carried_by_rows",
    "derived_event_id",
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
_COMPLETES = {
    Direction.FORWARD.value: (StepState.IN_PROGRESS.value, StepState.SUCCEEDED.value),
    Direction.COMPENSATION.value: (StepState.COMPENSATING.value, StepState.COMPENSATED.value),
}
# the states a settlement moves a dispatch to (the CHECK on settled_to)
_SETTLED_TO = frozenset(DispatchState) - {DispatchState.QUEUED, DispatchState.IN_FLIGHT}


def derived_event_id(dispatch_id: int, attempt: int, kind: str = CLAIMED) -> int:
    """The ``event_id`` of the entry of ``kind`` derived from dispatch ``dispatch_id``'s rows
    (``attempt``: the attempt row's; 0 for the enqueue and the step moves)."""
    base = dispatch_id * _ATTEMPT_SPAN + attempt
    return -(_SETTLED_BASE + base) if kind == SETTLED else -base


def _start_event_id(dispatch_id: int) -> int:
    return -(dispatch_id * _ATTEMPT_SPAN + _START_SLOT)


def _saga_end_event_id(dispatch_id: int) -> int:
    return -(_SETTLED_BASE + dispatch_id * _ATTEMPT_SPAN + _START_SLOT)


# -- writing: what the rows carry ------------------------------------------------------------


@frozen
class Carried:
    """One transition's timeline, split: the events to store, and the entries its rows carry
    (the settlement on the attempt row it settles, each enqueue on its new outbox row)."""

    events: list[Event]
    settled: Event | None = None
    enqueued_by: dict[tuple[str, str], str] = field(default_factory=dict)  # (effect, way): who
    settled_step: Event | None = None  # the step move the settlement's attempt row carries
    # (effect, way) -> the state its step started from, when its outbox row carries the start
    started_from: dict[tuple[str, str], str] = field(default_factory=dict)
    follows: int | None = None  # the settlement's entry id, which those enqueues follow
    settled_saga: Event | None = None  # the saga's completion the attempt row carries


def carried_by_rows(
    events: Sequence[Event],
    new: Sequence[DispatchSpec],
    settles: tuple[Completion, str, str] | None = None,
) -> Carried:
    """Split ``events`` (one transition's or one submission's, in order) into those to store
    and those its rows carry. ``new``: the outbox rows it inserts, in order; ``settles``: the
    completion the transition writes on its open attempt row, with that dispatch's effect id
    and direction (None when the attempt row is left as it is)."""
    settled = None
    if settles is not None and events and _own_settlement(events[0], *settles):
        settled = events[0]
    settled_step = start = chained = ended = None
    started_from: dict[tuple[str, str], str] = {}
    follows = None
    if settled is not None and settles is not None:
        completion, effect_id, direction = settles
        if len(events) > 1 and _completes(events[1], settled, effect_id, direction):
            settled_step = events[1]
        at = 2 if settled_step is not None else 1
        if (
            settled_step is not None
            and not new
            and len(events) > at
            and _completes_saga(events[at], settled)
        ):
            ended = events[at]
        if (
            len(new) == 1
            and len(events) > at + 1
            and _chain_start(events[at], events[at + 1], new[0])
        ):
            start, chained = events[at], events[at + 1]  # the enqueue: checked already
            started_from[(new[0].effect_id, new[0].direction)] = start.from_state or ""
            follows = derived_event_id(completion.dispatch_id, completion.attempt, SETTLED)
    specs = {(spec.effect_id, spec.direction): spec for spec in new}
    enqueued_by: dict[tuple[str, str], str] = {}
    kept: list[Event] = []
    for index, event in enumerate(events):
        if event is settled or event is settled_step or event is start or event is ended:
            continue
        key = (event.effect_id or "", event.direction or "")
        spec = specs.get(key)
        if (
            spec is not None
            and key not in enqueued_by
            and index > 0
            and (
                event is chained
                or (
                    (_starts(events[index - 1], spec) or _first(events[:index], enqueued_by))
                    and event == enqueued_event(spec, event.actor)
                )
            )
        ):
            enqueued_by[key] = event.actor
            continue
        kept.append(event)
    return Carried(kept, settled, enqueued_by, settled_step, started_from, follows, ended)


def _own_settlement(event: Event, completion: Completion, effect_id: str, direction: str) -> bool:
    """``event`` is the attempt row's settlement as the row gives it back: out of in_flight,
    no evidence, its detail the row's columns."""
    to_state = event.to_state or ""
    return (
        to_state in _SETTLED_TO
        and completion.operator_evidence is None
        and event
        == settled_event(completion, effect_id, direction, DispatchState.IN_FLIGHT.value, to_state)
    )


def _plain_step_move(event: Event, effect_id: str, actor: str) -> bool:
    """``event`` is a step move of ``effect_id`` by ``actor`` as a row gives it back: no
    direction, attempt, evidence or detail."""
    return (
        event.kind == STEP_MOVED
        and event.effect_id == effect_id
        and event.direction is None
        and event.attempt is None
        and event.evidence is None
        and not event.detail
        and event.actor == actor
    )


def _completes(event: Event, settled: Event, effect_id: str, direction: str) -> bool:
    """``event`` is the step move of the success ``settled`` settles, as its row gives it back."""
    return (
        settled.to_state == DispatchState.SUCCEEDED.value
        and _plain_step_move(event, effect_id, settled.actor)
        and (event.from_state, event.to_state) == _COMPLETES.get(direction)
    )


def _completes_saga(event: Event, settled: Event) -> bool:
    """``event`` is the saga's completion as the settlement's row gives it back: running to
    completed by the settlement's actor, saying nothing else."""
    return event == Event(
        SAGA_MOVED,
        from_state=SagaState.RUNNING.value,
        to_state=SagaState.COMPLETED.value,
        actor=settled.actor,
    )


def _chain_start(start: Event, enqueue: Event, spec: DispatchSpec) -> bool:
    """``start`` starts ``spec``'s step and ``enqueue`` enqueues it right after, both as the
    outbox row gives them back."""
    return (
        _starts(start, spec)
        and start.from_state is not None
        and _plain_step_move(start, spec.effect_id, enqueue.actor)
        and enqueue == enqueued_event(spec, enqueue.actor)
    )


def _starts(event: Event, spec: DispatchSpec) -> bool:
    """``event`` is the one that starts ``spec``'s step (the enqueue goes right after it)."""
    return (
        event.kind == STARTED
        and event.effect_id == spec.effect_id
        and event.to_state == _STARTS.get(spec.direction)
    )


def _first(before: Sequence[Event], carried: Mapping[tuple[str, str], str]) -> bool:
    """The events ``before`` an enqueue are the submission and the enqueues of the saga's
    other first dispatches, each carried: it is a first dispatch too."""
    return before[0].kind == SUBMITTED and all(
        e.kind == ENQUEUED and (e.effect_id, e.direction) in carried for e in before[1:]
    )


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
        entry = _entry(row, 0, events[index]["at"] if index >= 0 else row["at"], ENQUEUED)
        if index < 0 or events[index]["kind"] == SUBMITTED:
            # the submit wrote its events' detail as canonical JSON (keys sorted); the
            # engine's keep the order they were built in (SQLite keeps it, jsonb sorts)
            entry["detail"] = dict(sorted(entry["detail"].items()))
        after.setdefault(index, []).append(entry)
    ids = [event["event_id"] for event in events]
    for row in sorted(settlements, key=lambda r: (r["at"], r["dispatch_id"], r["attempt"])):
        index = bisect_right(ids, row["settled_after"]) - 1
        entry = _entry(row, row["attempt"], row["at"], SETTLED)
        group = after.setdefault(index, [])
        group.append(entry)
        if row.get("settled_step") is not None:
            moved = _COMPLETES[row["direction"]][0], row["settled_step"]
            group.append(_move(row, derived_event_id(row["dispatch_id"], 0, SETTLED), moved))
        if row.get("settled_saga") is not None:
            ended = SagaState.RUNNING.value, row["settled_saga"]
            group.append(_move(row, _saga_end_event_id(row["dispatch_id"]), ended, SAGA_MOVED))
        for enqueue in follow.pop(entry["event_id"], []):
            moved = enqueue["started_from"], _STARTS[enqueue["direction"]]
            group.append(_move(enqueue, _start_event_id(enqueue["dispatch_id"]), moved))
            group.append(_entry(enqueue, 0, enqueue["at"], ENQUEUED))
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

"""The timeline a saga view shows: the stored events (``effectus_saga_events``) with one
``dispatch_claimed`` entry per attempt row, derived from that row instead of stored.

A claim writes the attempt row it opens (dispatch, attempt, lease owner, lease deadline,
``claimed_at``) and nothing else: the timeline entry of the claim says nothing the row does not,
so it is read from the row (``select_saga_events`` reads events and attempt rows in one
statement, so in one snapshot). Sagas claimed by earlier versions, which stored a
``dispatch_claimed`` event with each claim, show that stored event and derive none for it.

Where a derived entry goes, for ties too:

* after the stored event that made the dispatch due for this attempt (its enqueue, the
  settlement of the attempt before, an operator's retry): the latest stored event of the same
  dispatch moving it to ``queued`` or ``retry_wait`` before any event of this attempt or a later
  one. Its ``to_state`` is the claim's ``from_state``, as the claim read it from the row;
* before every stored event of the same dispatch about this attempt or a later one (the claim
  opens its attempt);
* between those two, in time: after every stored event at or before ``claimed_at`` (the
  claim transaction's start). A claim made in the transaction that enqueued the dispatch has a
  ``claimed_at`` before its enqueue event's ``at``; the first rule keeps it after that event;
* derived entries at the same place: by ``claimed_at``, then dispatch, then attempt.

A derived entry has no stored row, so no stored ``event_id``: it gets a negative one, unique
in the saga (for attempts below 65536) and the same on every read,
``-(dispatch_id * 65536 + attempt)``. Stored events keep their own (positive, ascending along
the timeline). Nothing pages by ``event_id``; a reader that did would page the stored events.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

__all__ = ["CLAIMED", "derived_event_id", "with_claims"]

CLAIMED = "dispatch_claimed"
_DUE = ("queued", "retry_wait")  # the states a claim takes a row from (claim_ready.sql)
_ATTEMPT_SPAN = 65536


def derived_event_id(dispatch_id: int, attempt: int) -> int:
    """The ``event_id`` of the claim entry derived from attempt row (dispatch_id, attempt)."""
    return -(dispatch_id * _ATTEMPT_SPAN + attempt)


def with_claims(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The timeline of ``select_saga_events`` rows: the stored events (``event_id`` set), in
    ``event_id`` order, with the claim row of every attempt (``event_id`` NULL) that has no
    stored claim event, each made an entry and placed as the module docstring says."""
    events = [row for row in rows if row["event_id"] is not None]
    stored = {
        (e["effect_id"], e["direction"], e["attempt"]) for e in events if e["kind"] == CLAIMED
    }
    placed: list[tuple[int, datetime, int, int, dict[str, Any]]] = []
    for row in rows:
        key = (row["effect_id"], row["direction"], row["attempt"])
        if row["event_id"] is not None or key in stored:
            continue  # a stored event; or a claim an earlier version stored as one
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
            "at": row["at"],  # claimed_at: the claim transaction's start
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
    """Where ``claim`` goes (the index of the stored event it comes before) and the state it
    took its dispatch from."""
    effect_id, direction, attempt = claim["effect_id"], claim["direction"], claim["attempt"]
    after, before = -1, len(events)
    from_state = "queued" if attempt == 1 else "retry_wait"  # only if no event says (none lost)
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

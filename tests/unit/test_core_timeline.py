"""Where the claim entries derived from attempt rows go in a saga's timeline, and the state
each says the claim took its dispatch from (effectusd.core.timeline)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from effectusd.core.timeline import derived_event_id, with_claims

T0 = datetime(2026, 1, 1, tzinfo=UTC)
EFFECT_OF = {7: "a", 9: "b"}  # dispatch_id -> effect_id


def at(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def stored(
    event_id: int,
    ms: int,
    kind: str,
    effect_id: str | None = None,
    attempt: int | None = None,
    to_state: str | None = None,
    direction: str | None = "forward",
) -> dict[str, Any]:
    return {
        "event_id": event_id,
        "effect_id": effect_id,
        "direction": direction if effect_id else None,
        "attempt": attempt,
        "kind": kind,
        "from_state": None,
        "to_state": to_state,
        "actor": "engine",
        "evidence": None,
        "detail": {},
        "at": at(ms),
        "dispatch_id": None,
        "lease_expires_at": None,
    }


def attempt_row(dispatch_id: int, attempt: int, ms: int) -> dict[str, Any]:
    """The row select_saga_events reads for an attempt row (claimed ``ms`` after T0)."""
    return {
        "event_id": None,
        "effect_id": EFFECT_OF[dispatch_id],
        "direction": "forward",
        "attempt": attempt,
        "kind": "dispatch_claimed",
        "from_state": None,
        "to_state": "in_flight",
        "actor": f"daemon-{dispatch_id}",
        "evidence": None,
        "detail": None,
        "at": at(ms),
        "dispatch_id": dispatch_id,
        "lease_expires_at": at(ms + 30_000),
    }


def order(entries: list[Any]) -> list[tuple[Any, ...]]:
    return [(e["kind"], e["effect_id"], e["attempt"], e["from_state"]) for e in entries]


def test_a_claim_entry_is_the_attempt_row_read_as_the_stored_event_was() -> None:
    events = [stored(1, 0, "dispatch_enqueued", "a", to_state="queued")]
    [_, claim] = with_claims([*events, attempt_row(7, 1, 5)])
    assert claim == {
        "event_id": derived_event_id(7, 1),
        "effect_id": "a",
        "direction": "forward",
        "attempt": 1,
        "kind": "dispatch_claimed",
        "from_state": "queued",
        "to_state": "in_flight",
        "actor": "daemon-7",
        "evidence": None,
        "detail": {"lease_expires_at": at(30_005).isoformat()},
        "at": at(5),
    }
    assert derived_event_id(7, 1) < 0 and derived_event_id(7, 2) != derived_event_id(9, 1)


def test_a_claim_goes_between_what_made_it_due_and_its_attempt_ties_included() -> None:
    events = [
        stored(1, 0, "dispatch_enqueued", "a", to_state="queued"),
        stored(2, 10, "attempt_settled", "a", 1, "retry_wait"),
        stored(3, 20, "step_state", "b", direction=None),  # same time as the claim: before it
        stored(4, 20, "attempt_settled", "a", 2, "succeeded"),  # its own attempt: after it
    ]
    merged = with_claims([*events, attempt_row(7, 1, 10), attempt_row(7, 2, 20)])
    assert order(merged) == [
        ("dispatch_enqueued", "a", None, None),
        ("dispatch_claimed", "a", 1, "queued"),  # tied with the settlement of attempt 1
        ("attempt_settled", "a", 1, None),
        ("step_state", "b", None, None),
        ("dispatch_claimed", "a", 2, "retry_wait"),
        ("attempt_settled", "a", 2, None),
    ]


def test_a_claim_made_in_the_transaction_that_enqueued_it_comes_after_the_enqueue() -> None:
    """In one transaction claimed_at (its start) is before the events' clock times."""
    events = [
        stored(1, 0, "saga_submitted"),
        stored(2, 50, "dispatch_enqueued", "a", to_state="queued"),
        stored(3, 51, "dispatch_enqueued", "b", to_state="queued"),
    ]
    merged = with_claims([*events, attempt_row(9, 1, 40), attempt_row(7, 1, 40)])
    assert order(merged) == [
        ("saga_submitted", None, None, None),
        ("dispatch_enqueued", "a", None, None),
        ("dispatch_claimed", "a", 1, "queued"),
        ("dispatch_enqueued", "b", None, None),
        ("dispatch_claimed", "b", 1, "queued"),
    ]


def test_claims_at_one_place_and_time_go_by_dispatch() -> None:
    events = [
        stored(1, 0, "dispatch_enqueued", "a", to_state="queued"),
        stored(2, 0, "dispatch_enqueued", "b", to_state="queued"),
    ]
    merged = with_claims([*events, attempt_row(9, 1, 5), attempt_row(7, 1, 5)])
    assert [e["event_id"] for e in merged] == [1, 2, derived_event_id(7, 1), derived_event_id(9, 1)]


def test_the_state_a_claim_took_its_dispatch_from_is_the_one_the_timeline_last_gave_it() -> None:
    """An operator's retry of a dispatch blocked before its first attempt puts it in
    retry_wait: attempt 1 is then claimed from retry_wait, not from queued."""
    events = [
        stored(1, 0, "dispatch_enqueued", "a", to_state="queued"),
        stored(2, 5, "attempt_settled", "a", 1, "blocked_unknown"),
        stored(3, 9, "dispatch_enqueued", "b", to_state="queued"),
        stored(4, 10, "operator_retry", "b", 0, "retry_wait"),
        stored(5, 20, "operator_resolve", "a", 1, "retry_wait"),
    ]
    attempts = [attempt_row(7, 1, 1), attempt_row(7, 2, 30), attempt_row(9, 1, 15)]
    merged = with_claims(events + attempts)
    assert with_claims(attempts + events) == merged  # SQLite sorts the NULL event_ids first
    assert [row for row in order(merged) if row[0] == "dispatch_claimed"] == [
        ("dispatch_claimed", "a", 1, "queued"),
        ("dispatch_claimed", "b", 1, "retry_wait"),
        ("dispatch_claimed", "a", 2, "retry_wait"),
    ]


def test_a_claim_stored_by_an_earlier_version_is_not_derived_again() -> None:
    events = [
        stored(1, 0, "dispatch_enqueued", "a", to_state="queued"),
        stored(2, 5, "dispatch_claimed", "a", 1, "in_flight"),
        stored(3, 9, "attempt_settled", "a", 1, "retry_wait"),
    ]
    merged = with_claims([*events, attempt_row(7, 1, 5), attempt_row(7, 2, 20)])
    assert [e["event_id"] for e in merged] == [1, 2, 3, derived_event_id(7, 2)]
    assert with_claims(events) == events

"""The daemon's slots: where a claim the recorder makes may wait for its destination's next
free slot, and what one record's slots take, hand over and give back (no store: the counts
alone; the waiting claims' calls are tests/integration/test_claim_in_record.py's)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from effectusd.config import parse_config
from effectusd.core.pre_send import may_wait_for_slot
from effectusd.core.states import Delivery
from effectusd.dispatcher.capacity import WAITING_PER_SLOT, Capacity, RecordSlots, wait_limits


def test_only_an_unfenced_at_least_once_step_may_wait_written_ahead() -> None:
    assert may_wait_for_slot(Delivery.AT_LEAST_ONCE, fenced=False)
    assert not may_wait_for_slot(Delivery.AT_LEAST_ONCE, fenced=True)
    assert not may_wait_for_slot(Delivery.AT_MOST_ONCE, fenced=False)


@pytest.mark.parametrize(
    ("longest_s", "per_slot"),
    [
        (10.0, 2),  # three of them fit into 30 s: two wait, one is spare
        (14.9, 1),
        (15.0, 1),
        (15.1, 0),  # not two: none waits
        (30.0, 0),
        (1.0, WAITING_PER_SLOT),  # twenty-nine fit; the bound holds
    ],
)
def test_as_many_claims_wait_per_slot_as_the_longest_calls_fit_into_the_margin(
    longest_s: float, per_slot: int
) -> None:
    limits = wait_limits({"a": 8, "b": 3}, {"a": longest_s, "b": 100.0}, lease_margin_s=30.0)
    assert limits == ({"a": 8 * per_slot} if per_slot else {})


def test_the_longest_call_of_a_destination_is_its_slowest_verb_or_its_own_timeout() -> None:
    registry = parse_config(
        {
            "destinations": {
                "a": {"base_url": "http://127.0.0.1:9", "timeout": "4s"},
                "b": {"base_url": "http://127.0.0.1:9", "timeout": "3s"},
                "c": {"base_url": "http://127.0.0.1:9", "timeout": "2s"},
            },
            "verbs": {
                "a.quick": {"destination": "a", "path": "/q", "timeout": "1s"},
                "a.slow": {"destination": "a", "path": "/s", "timeout": "12s"},
                "b.plain": {"destination": "b", "path": "/p"},
            },
        }
    ).registry()
    assert registry.longest_timeout("a") == timedelta(seconds=12)
    assert registry.longest_timeout("b") == timedelta(seconds=3)
    assert registry.longest_timeout("c") == timedelta(seconds=2)  # no verb: its own


def _slots(**waits: int) -> tuple[Capacity, RecordSlots]:
    capacity = Capacity(limits={"a": 2, "b": 1}, total_limit=3, wait_limits=waits)
    return capacity, RecordSlots(capacity, lambda: True)


def test_a_record_takes_free_slots_first_then_waits_only_while_the_destination_is_full() -> None:
    capacity, slots = _slots(a=2)
    assert slots.take("a", may_wait=True) and slots.take("a", may_wait=True)  # two free slots
    assert capacity.in_flight == {"a": 2} and capacity.waiting["a"] == 0
    assert not slots.take("a", may_wait=False)  # full, and this row may not wait
    assert slots.take("a", may_wait=True) and slots.take("a", may_wait=True)  # two places
    assert not slots.take("a", may_wait=True)  # the wait limit
    assert capacity.waiting["a"] == 2
    assert slots.take("b", may_wait=True)  # b's own free slot
    assert not slots.take("b", may_wait=True)  # b lets nothing wait


def test_no_claim_waits_for_a_destination_below_its_limit_with_the_overall_room_gone() -> None:
    """Then no call of its own is sure to end and free a slot for it: written queued."""
    capacity, slots = _slots(a=2, b=1)
    capacity.take("a")
    capacity.take("a")
    capacity.take("other")  # the overall room (3) is gone; "b" has none of it in flight
    assert not capacity.has_room_for("b")
    assert not slots.take("b", may_wait=True)
    assert slots.take("a", may_wait=True)  # "a" is full: one of its calls frees its slot


def test_a_record_that_does_not_commit_gives_back_its_slots_and_places() -> None:
    capacity, slots = _slots(a=2)
    for _ in range(4):
        assert slots.take("a", may_wait=True)
    slots.undo()
    assert capacity.in_flight == {"a": 0} and capacity.waiting["a"] == 0


def test_a_committed_record_hands_its_claims_to_their_slots_and_the_rest_to_waiting() -> None:
    capacity, slots = _slots(a=2)
    for _ in range(3):
        assert slots.take("a", may_wait=True)
    assert slots.take("b", may_wait=False)
    now, waiting = slots.committed(["a1", "b1", "a2", "a3"], lambda claim: claim[0])
    assert (now, waiting) == (["a1", "b1", "a2"], ["a3"])
    assert capacity.in_flight == {"a": 2, "b": 1} and capacity.waiting["a"] == 1


def test_a_committed_record_frees_what_did_not_come_back_claimed() -> None:
    capacity, slots = _slots(a=2)
    for _ in range(3):
        assert slots.take("a", may_wait=True)
    now, waiting = slots.committed(["a1"], lambda claim: claim[0])
    assert (now, waiting) == (["a1"], [])
    assert capacity.in_flight == {"a": 1} and capacity.waiting["a"] == 0


def test_nothing_is_taken_while_claiming_is_off() -> None:
    capacity = Capacity(limits={"a": 1}, total_limit=1, wait_limits={"a": 1})
    slots = RecordSlots(capacity, lambda: False)
    assert not slots.take("a", may_wait=True)
    assert capacity.busy == 0

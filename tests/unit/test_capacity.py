"""The daemon's slots: where a claim a record makes may wait for its destination's next free
slot, what one record's slots take, hand over and give back, and the recorder's sink that
claims into them (no store: the counts alone; the waiting claims' calls are
tests/integration/test_claim_in_record.py's)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from effectusd.config import parse_config
from effectusd.core.pre_send import may_wait_for_slot
from effectusd.core.states import Delivery
from effectusd.core.transition import Completion
from effectusd.dispatcher.capacity import (
    WAITING_PER_SLOT,
    Capacity,
    ClaimingSink,
    RecordSlots,
    wait_limits,
)
from effectusd.store.dispatch import RecordReport


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


class ClaimingStore:
    """A store that claims in its record (or not: SQLite): each outcome's next step goes to
    "a", written claimed where the slots given take it; ``fail`` rolls the record back."""

    def __init__(self, claims_in_record: bool = True, fail: bool = False) -> None:
        self.claims_in_record = claims_in_record
        self.fail = fail
        self.given: list[Any] = []

    async def record(self, batch: Sequence[Completion], slots: Any = None) -> RecordReport:
        self.given.append(slots)
        report = RecordReport(applied=len(batch))
        for _ in batch:
            if slots is not None and slots.take("a", may_wait=True):
                report.claimed.append(SimpleNamespace(destination="a"))  # type: ignore[arg-type]
        if self.fail:
            raise RuntimeError("the transaction rolled back")
        return report


def _sink(store: ClaimingStore, claiming: bool = True) -> tuple[Capacity, ClaimingSink, list]:
    capacity = Capacity(limits={"a": 2}, total_limit=2, wait_limits={"a": 1})
    told: list[tuple[int, int]] = []
    sink = ClaimingSink(
        store,  # type: ignore[arg-type]
        capacity,
        lambda: claiming,
        lambda now, waiting, _started: told.append((len(now), len(waiting))),
    )
    return capacity, sink, told


BATCH = [
    Completion.reclaimed(
        SimpleNamespace(dispatch_id=i, attempt=1, lease_token="t"),
        sent=False,
        lease_owner="d",
        actor="d",
    )
    for i in range(4)
]  # type: ignore[arg-type]


async def test_the_sink_hands_a_committed_records_claims_to_the_pipeline() -> None:
    store = ClaimingStore()
    capacity, sink, told = _sink(store)
    report = await sink.write(BATCH)
    assert len(report.claimed) == 3  # two slots, one place; the fourth is written queued
    assert told == [(2, 1)]
    assert capacity.in_flight == {"a": 2} and capacity.waiting["a"] == 1


async def test_the_sink_gives_back_what_a_record_that_rolls_back_took() -> None:
    store = ClaimingStore(fail=True)
    capacity, sink, told = _sink(store)
    with pytest.raises(RuntimeError):
        await sink.write(BATCH)
    assert told == [] and capacity.busy == 0 and capacity.waiting["a"] == 0


async def test_the_sink_claims_nothing_where_the_store_cannot_or_claiming_is_off() -> None:
    store = ClaimingStore(claims_in_record=False)
    _, sink, told = _sink(store)
    await sink.write(BATCH)
    assert store.given == [None] and told == []
    store = ClaimingStore()
    capacity, sink, told = _sink(store, claiming=False)
    report = await sink.write(BATCH)
    assert report.claimed == [] and told == [(0, 0)] and capacity.busy == 0

"""The daemon's slots: where a claim a record makes may wait for its destination's next free
slot, and what one record's budget reserves, hands over and gives back (no store: the counts
alone, and a fake store spending budgets as the real one does; the waiting claims' calls are
tests/integration/test_claim_in_record.py's)."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from datetime import timedelta

import pytest

from effectusd.config import parse_config
from effectusd.core.settlement import may_wait_for_slot
from effectusd.core.states import Delivery
from effectusd.dispatcher.capacity import WAITING_PER_SLOT, Capacity, wait_limits
from effectusd.store.records import SlotBudget, Spending


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


def _capacity(**waits: int) -> Capacity:
    return Capacity(limits={"a": 2, "b": 1}, total_limit=3, wait_limits=waits)


def _takes(budget: SlotBudget, rows: list[tuple[str, bool]]) -> list[bool]:
    """What one record transaction writes claimed of ``rows`` (destination, may wait), as
    the store spends its budget."""
    spending = Spending(budget)
    return [spending.take(destination, may_wait) for destination, may_wait in rows]


def test_a_record_takes_free_slots_first_then_waits_only_while_the_destination_is_full() -> None:
    capacity = _capacity(a=2)
    budget = capacity.budget(outcomes=8)
    assert budget == SlotBudget(claim={"a": 2, "b": 1}, total=3, wait={"a": 2})
    assert capacity.in_flight == {"a": 2, "b": 1} and capacity.waiting["a"] == 2  # reserved
    rows = [("a", True), ("a", True), ("a", False), ("a", True), ("a", True), ("a", True)]
    # two free slots; full, and this row may not wait; two places; the wait limit
    assert _takes(budget, rows) == [True, True, False, True, True, False]
    assert _takes(budget, [("b", True), ("b", True)]) == [True, False]  # b lets nothing wait


def test_no_claim_waits_for_a_destination_below_its_limit_with_the_overall_room_gone() -> None:
    """Then no call of its own is sure to end and free a slot for it: written queued."""
    capacity = _capacity(a=2, b=1)
    capacity.take("a")
    capacity.take("a")
    capacity.take("other")  # the overall room (3) is gone; "b" has none of it in flight
    budget = capacity.budget(outcomes=8)
    assert budget == SlotBudget(claim={}, total=0, wait={"a": 2})
    assert _takes(budget, [("b", True), ("a", True)]) == [False, True]  # "a" is full


def test_a_record_claims_at_most_one_slot_per_outcome_and_waits_only_where_that_fills_it() -> None:
    capacity = _capacity(a=2)
    budget = capacity.budget(outcomes=1)
    assert budget == SlotBudget(claim={"a": 1, "b": 1}, total=1, wait={})
    assert _takes(budget, [("a", True), ("b", True)]) == [True, False]


def test_a_record_that_rolls_back_gives_back_every_slot_and_place_it_reserved() -> None:
    capacity = _capacity(a=2)
    capacity.take("a")
    budget = capacity.budget(outcomes=8)
    assert _takes(budget, [("a", True)] * 4) == [True] * 3 + [False]
    assert capacity.settle(budget, [], _to) == ([], [])  # rolled back: nothing claimed
    assert capacity.in_flight == {"a": 1, "b": 0} and capacity.waiting["a"] == 0


def test_a_committed_record_hands_its_claims_to_their_slots_and_the_rest_to_waiting() -> None:
    capacity = _capacity(a=2)
    budget = capacity.budget(outcomes=8)
    assert _takes(budget, [("a", True)] * 3 + [("b", False)]) == [True] * 4
    now, waiting = capacity.settle(budget, ["a1", "b1", "a2", "a3"], _to)
    assert (now, waiting) == (["a1", "b1", "a2"], ["a3"])
    assert capacity.in_flight == {"a": 2, "b": 1} and capacity.waiting["a"] == 1


def test_a_committed_record_gives_back_what_it_did_not_use() -> None:
    capacity = _capacity(a=2)
    budget = capacity.budget(outcomes=8)
    now, waiting = capacity.settle(budget, ["a1"], _to)
    assert (now, waiting) == (["a1"], [])
    assert capacity.in_flight == {"a": 1, "b": 0} and capacity.waiting["a"] == 0


def _to(claim: str) -> str:
    return claim[0]


class FakeStore:
    """Claims as the real store does: the claim loop's statement takes what it asks for of
    the due rows; a record writes a next step per outcome claimed as its budget allows. Each
    yields to the loop in the middle, as a statement's round trip does."""

    def __init__(self, destinations: list[str]) -> None:
        self.destinations = destinations
        self.serial = 0

    async def claim(self, wanted: dict[str, int], total: int) -> list[str]:
        """Up to one due row per destination (so the records find free slots too)."""
        await asyncio.sleep(0)
        due = [d for d, free in wanted.items() if free > 0 and random.random() < 0.3]
        return [self._name(d) for d in due[:total]]

    async def record(self, outcomes: int, budget: SlotBudget, fail: bool) -> list[str]:
        spending = Spending(budget)
        await asyncio.sleep(0)
        rows = [(random.choice(self.destinations), random.random() < 0.2) for _ in range(outcomes)]
        claimed = [self._name(d) for d, may_wait in rows if spending.take(d, may_wait)]
        await asyncio.sleep(0)
        if fail:
            raise RuntimeError("the transaction rolled back")
        return claimed

    def _name(self, destination: str) -> str:
        self.serial += 1
        return f"{destination}{self.serial}"


async def test_a_claim_loop_and_records_side_by_side_never_exceed_any_limit() -> None:
    """A claim loop and two recorders (the recorder and the reclaim) claim at once, calls end
    meanwhile, a record in four rolls back: no destination ever has more in flight than its
    ``max_concurrency``, the daemon no more than its concurrency, no more claims wait than
    the wait limits, and once every call ended every slot is free."""
    random.seed(47)
    capacity = Capacity(limits={"a": 3, "b": 1}, total_limit=3, wait_limits={"a": 3, "b": 1})
    store = FakeStore(["a", "b"])
    calls: list[str] = []  # in flight, as the pipeline holds them
    waiting: list[str] = []
    seen = {"a": 0, "b": 0, "total": 0, "waiting": 0}

    def check() -> None:
        real = Counter(claim[0] for claim in calls)
        for destination, limit in capacity.limits.items():
            assert capacity.in_flight.get(destination, 0) <= limit
            assert real[destination] <= limit
            seen[destination] = max(seen[destination], real[destination])
        assert len(calls) <= capacity.total_limit
        assert capacity.waiting["a"] <= 3 and capacity.waiting["b"] <= 1
        seen["total"] = max(seen["total"], len(calls))
        seen["waiting"] = max(seen["waiting"], len(waiting))

    def start_waiting() -> None:
        for claim in list(waiting):
            if capacity.has_room_for(claim[0]):
                waiting.remove(claim)
                capacity.take(claim[0])
                capacity.waiting[claim[0]] -= 1
                calls.append(claim)

    async def claim_loop() -> None:
        while not all(task.done() for task in workers[1:]):
            free = capacity.free()
            room = capacity.room
            capacity.reserve(free)
            claims: list[str] = []
            try:
                claims = await store.claim(free, room)
            finally:
                capacity.keep(free, (c[0] for c in claims))
                start_waiting()  # slots the claim did not use (as the pipeline does)
            calls.extend(claims)
            check()
            for _ in range(random.randint(1, 6)):  # the loop waits to be woken
                await asyncio.sleep(0)

    async def recorder(rounds: int) -> None:
        for turn in range(rounds):
            outcomes = random.randint(1, 4)
            budget = capacity.budget(outcomes)
            check()
            try:
                claimed = await store.record(outcomes, budget, fail=turn % 4 == 3)
            except RuntimeError:
                capacity.settle(budget, [], _to)
                start_waiting()  # the slots it gave back
                continue
            now, later = capacity.settle(budget, claimed, _to)
            calls.extend(now)
            waiting.extend(later)
            start_waiting()
            check()

    async def calls_end() -> None:
        while any(not task.done() for task in workers) or calls or waiting:
            for _ in range(random.randint(0, len(calls))):  # calls end, some at once
                ended = calls.pop(random.randrange(len(calls)))
                capacity.give_back(ended[0])
                start_waiting()
            check()
            await asyncio.sleep(0)

    workers = [asyncio.ensure_future(w) for w in (claim_loop(), recorder(150), recorder(150))]
    await asyncio.wait_for(asyncio.gather(*workers, calls_end()), timeout=30)
    assert capacity.busy == 0 and sum(capacity.waiting.values()) == 0
    assert seen == {"a": 3, "b": 1, "total": 3, "waiting": seen["waiting"]}
    assert seen["waiting"] > 0  # some record's claims did wait for a slot


def test_nothing_is_reserved_when_a_destination_has_neither_slot_nor_place() -> None:
    capacity = Capacity(limits={"a": 1}, total_limit=1, wait_limits={})
    capacity.take("a")
    assert capacity.budget(outcomes=4) == SlotBudget(claim={}, total=0, wait={})
    assert capacity.in_flight == {"a": 1}

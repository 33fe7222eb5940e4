"""Slots: how many calls the pipeline has in flight, per destination and overall, and the
recorder's sink that claims into them.

A slot is taken when a row is claimed, by the claim loop or by a record that claims a saga's
next step where it writes it (``ClaimingSink``), and given back when the call ends or nothing
came of the claim. Whoever takes one takes it with no await between the check and the take; a
claim statement reserves the slots it asks for while it runs (``reserve``, ``keep``), and a
record transaction the slots and places of its ``SlotBudget`` (``budget``, ``settle``).

A next step a record claims while its destination is full may instead wait in the daemon for
that destination's next free slot: only where its destination's calls all end well within the
lease's margin, so that every waiting claim starts before its lease runs short
(``wait_limits``), and only a step whose early write-ahead costs no guard
(``effectusd.core.settlement.may_wait_for_slot``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TypeVar

from effectusd.core.transition import Completion
from effectusd.store.dispatch import DispatchStore, RecordReport
from effectusd.store.records import Claim, SlotBudget

T = TypeVar("T")


@dataclass
class Capacity:
    """In-flight calls per destination and overall; a claim only takes free slots.

    Every destination with room under its own limit may claim up to that room (never more
    than the overall room); the claim deals the overall room among the destinations that
    have due rows (``DispatchStore.claim``), so an idle destination holds no slot."""

    limits: Mapping[str, int]
    total_limit: int
    in_flight: dict[str, int] = field(default_factory=dict)
    # How many claimed rows may wait for a slot, per destination (none where absent), and
    # how many do (or are promised a place by a record that has not committed yet).
    wait_limits: Mapping[str, int] = field(default_factory=dict)
    waiting: Counter[str] = field(default_factory=Counter)

    @property
    def room(self) -> int:
        return max(self.total_limit - self.busy, 0)

    def free(self) -> dict[str, int]:
        room = self.room
        free: dict[str, int] = {}
        for destination, limit in self.limits.items():
            slots = min(limit - self.in_flight.get(destination, 0), room)
            if slots > 0:
                free[destination] = slots
        return free

    def take(self, destination: str) -> None:
        self.in_flight[destination] = self.in_flight.get(destination, 0) + 1

    def give_back(self, destination: str) -> None:
        self.in_flight[destination] -= 1

    def has_room_for(self, destination: str) -> bool:
        return (
            self.in_flight.get(destination, 0) < self.limits.get(destination, 0)
            and self.busy < self.total_limit
        )

    def reserve(self, wanted: Mapping[str, int]) -> None:
        """Take ``wanted`` slots per destination before a claim is sent, so that nothing
        else can take them while it runs; ``keep`` gives back what the claim did not get."""
        for destination, slots in wanted.items():
            self.in_flight[destination] = self.in_flight.get(destination, 0) + slots

    def keep(self, wanted: Mapping[str, int], got: Iterable[str]) -> None:
        """Of a ``reserve(wanted)``, keep one slot per destination in ``got``."""
        unused = Counter(wanted)
        unused.subtract(got)
        for destination, slots in unused.items():
            self.in_flight[destination] -= slots

    def budget(self, outcomes: int) -> SlotBudget:
        """Reserve, before a record transaction of ``outcomes`` begins, what the next steps it
        writes may be claimed into: per destination its free slots, at most one per outcome,
        and at most the overall room in all; and where the destination is then at its own
        limit (one of its calls in flight frees a slot for a waiting claim), its free places
        among the claims that wait. ``settle`` gives back what the record did not use."""
        room = min(self.total_limit - self.busy, outcomes)
        claim: dict[str, int] = {}
        wait: dict[str, int] = {}
        for destination, limit in self.limits.items():
            own = limit - self.in_flight.get(destination, 0)
            slots = min(own, room)
            if slots > 0:
                claim[destination] = slots
                self.in_flight[destination] = limit - own + slots
            places = self.wait_limits.get(destination, 0) - self.waiting[destination]
            if places > 0 and slots >= own:
                wait[destination] = places
                self.waiting[destination] += places
        return SlotBudget(claim, room, wait)

    def settle(
        self, budget: SlotBudget, claims: Iterable[T], destination: Callable[[T], str]
    ) -> tuple[list[T], list[T]]:
        """The record that reserved ``budget`` ended: committed, with the ``claims`` it made,
        or not, with none. Its claims split into those with a slot, to call now (each slot
        given back when its call ends), and the others, to wait for a slot; every slot and
        place it did not use is given back."""
        slots = Counter(budget.claim)
        now: list[T] = []
        waiting: list[T] = []
        for claim in claims:
            to = destination(claim)
            if slots[to] > 0:
                slots[to] -= 1
                now.append(claim)
            else:
                waiting.append(claim)
        for to, unused in slots.items():
            self.in_flight[to] -= unused
        places = Counter(budget.wait)
        places.subtract(map(destination, waiting))
        self.waiting.subtract(places)
        return now, waiting

    @property
    def busy(self) -> int:
        return sum(self.in_flight.values())


# At most this many claims per slot wait for a destination's slots (bounds what they hold).
WAITING_PER_SLOT = 4


def wait_limits(
    limits: Mapping[str, int], longest_call_s: Mapping[str, float], lease_margin_s: float
) -> dict[str, int]:
    """How many claims may wait for a slot, per destination. A claim waits only while its
    destination is full and the claims before it are started first, so with ``k`` claims per
    slot waiting, the last of them starts within ``k`` of the destination's longest calls
    after its record began (each slot frees within one call, and is taken by the next waiting
    claim). Its lease is its call's timeout plus the lease's margin, so ``k`` is as many of
    the longest calls as fit into the margin with one to spare (for the record's own commit
    and the slack a call needs), and at most ``WAITING_PER_SLOT``: none where not even one
    fits."""
    limited: dict[str, int] = {}
    for destination, limit in limits.items():
        longest = longest_call_s[destination]
        per_slot = WAITING_PER_SLOT if longest <= 0 else int(lease_margin_s // longest) - 1
        if per_slot > 0:
            limited[destination] = limit * min(per_slot, WAITING_PER_SLOT)
    return limited


Claimed = Callable[[list[Claim], list[Claim], float], None]

_destination: Callable[[Claim], str] = attrgetter("destination")


class ClaimingSink:
    """The recorder's sink (``write(batch) -> RecordReport``, ``effectusd.dispatcher.recorder``):
    one transaction of the store's per batch, claiming the next steps it writes where the
    store can (docs/design.md section 7, step 5).

    Before the transaction it reserves a ``SlotBudget`` of the daemon's free slots
    (``Capacity.budget``); the store writes claimed each next step the budget has a slot or a
    waiting place for, and returns them; after it, committed or not, what the budget held and
    the record did not use is given back (``Capacity.settle``), so a record never holds more
    than its destinations' limits, nor keeps a slot it did not fill. The claims it made go to
    the pipeline (``claimed``): those with a slot are called at once, the others wait for
    their destination's next free slot."""

    def __init__(
        self,
        store: DispatchStore,
        capacity: Capacity,
        may_claim: Callable[[], bool],
        claimed: Claimed,
    ) -> None:
        """``may_claim``: whether a record may claim now (off before a drain, and while the
        recorder is behind). ``claimed(now, waiting, started)``: told once a record that
        claimed ended, of the claims it made (none if it did not commit) and the monotonic
        time its transaction began (its leases' start, as we see it): the slots it gave back
        may be a waiting claim's."""
        self.store = store
        self.capacity = capacity
        self.may_claim = may_claim
        self.claimed = claimed
        self.claims = store.claims_in_record

    async def write(self, batch: Sequence[Completion]) -> RecordReport:
        if not (self.claims and self.may_claim()):
            return await self.store.record(batch)
        capacity = self.capacity
        budget = capacity.budget(len(batch))
        started = time.monotonic()  # before the transaction: our view of the lease is early
        try:
            report = await self.store.record(batch, budget)
        except BaseException:
            capacity.settle(budget, (), _destination)  # nothing was claimed
            self.claimed([], [], started)
            raise
        now, waiting = capacity.settle(budget, report.claimed, _destination)
        self.claimed(now, waiting, started)
        return report

"""Slots: how many calls the pipeline has in flight, per destination and overall, and the
recorder's sink that claims into them (``ClaimingSink``).

A slot is taken when a row is claimed, by the claim loop or by a record (which claims a
saga's next step where it writes it, see ``RecordSlots``), and given back when the call ends
or nothing came of the claim. Whoever takes one takes it with no await between the check and
the take; a claim statement reserves the slots it asks for while it runs.

A next step the recorder claims while its destination is full may instead wait in the daemon
for that destination's next free slot (``Capacity.may_wait``): only where its destination's
calls all end well within the lease's margin, so that every waiting claim starts before its
lease runs short (``wait_limits``), and only a step whose early write-ahead costs no guard
(``effectusd.core.pre_send.may_wait_for_slot``).
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
from effectusd.store.records import Claim

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

    def may_wait(self, destination: str) -> bool:
        """A claim may wait for a slot of ``destination``: the destination is at its own
        limit, so one of its calls ends and frees a slot within its longest timeout, and
        fewer than its wait limit wait already. Waiting claims take slots before the claim
        loop does (``Pipeline``), so each is started by one of the calls now in flight."""
        return self.in_flight.get(destination, 0) >= self.limits.get(
            destination, 0
        ) and self.waiting[destination] < self.wait_limits.get(destination, 0)

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


class RecordSlots:
    """The slots one record of outcomes claims into (one transaction of it).

    While the recorder decides, ``take`` gives the next dispatch it writes a free slot of
    its destination's, within that destination's limit and the overall one, or, where the
    row ``may_wait`` and its destination lets it (``Capacity.may_wait``), a place among the
    claims waiting for that destination's next slot; False when there is neither (or claiming
    is off), and the row is written queued for the claim loop. A transaction that does not
    commit gives back what it took (``undo``); one that does hands its claims over
    (``committed``)."""

    def __init__(self, capacity: Capacity, claiming: Callable[[], bool]) -> None:
        self.capacity = capacity
        self.claiming = claiming
        self.taken: Counter[str] = Counter()
        self.waits: Counter[str] = Counter()

    def take(self, destination: str, may_wait: bool) -> bool:
        capacity = self.capacity
        if not self.claiming():
            return False
        if capacity.has_room_for(destination):
            capacity.take(destination)
            self.taken[destination] += 1
            return True
        if may_wait and capacity.may_wait(destination):
            capacity.waiting[destination] += 1
            self.waits[destination] += 1
            return True
        return False

    def undo(self) -> None:
        """The transaction that took ``taken`` did not commit: nothing was claimed."""
        self._release(Counter())

    def committed(
        self, claims: Iterable[T], destination: Callable[[T], str]
    ) -> tuple[list[T], list[T]]:
        """The transaction committed: its ``claims`` split into those with a slot taken, to
        be called now (each slot given back when its call ends), and the others, as many per
        destination as were told to wait, to wait for a slot."""
        slots, now, waiting = self.taken, [], []
        for claim in claims:
            to = destination(claim)
            if slots[to] > 0:
                slots[to] -= 1
                now.append(claim)
            else:
                waiting.append(claim)
        # Every row taken comes back claimed; should one not, its slot or place is freed.
        self._release(Counter(map(destination, waiting)))
        return now, waiting

    def _release(self, kept_waiting: Counter[str]) -> None:
        """Give back the slots left in ``taken`` and the places in ``waits`` beyond
        ``kept_waiting``, the claims that wait now; the next transaction starts afresh."""
        for destination, slots in self.taken.items():
            self.capacity.in_flight[destination] -= slots
        self.capacity.waiting.subtract(self.waits - kept_waiting)
        self.taken, self.waits = Counter(), Counter()


Claimed = Callable[[list[Claim], list[Claim], float], None]

_destination: Callable[[Claim], str] = attrgetter("destination")


class ClaimingSink:
    """The recorder's sink (``effectusd.dispatcher.recorder.Sink``): one transaction of the
    store's per batch, claiming the next steps it writes where the store can
    (``claims_in_record``, docs/design.md section 7, step 5) into the daemon's free slots
    (``RecordSlots``). A transaction that does not commit gives back every slot it took; one
    that does hands its claims to the pipeline (``claimed``): those with a slot are called at
    once, the others wait for their destination's next free slot."""

    def __init__(
        self,
        store: DispatchStore,
        capacity: Capacity,
        may_claim: Callable[[], bool],
        claimed: Claimed,
    ) -> None:
        """``may_claim``: whether a record may claim now (off before a drain, and while the
        recorder is behind). ``claimed(now, waiting, started)``: told once a record committed,
        of the claims it made and the monotonic time its transaction began (its leases'
        start, as we see it)."""
        self.store = store
        self.capacity = capacity
        self.may_claim = may_claim
        self.claimed = claimed
        self.claims = store.claims_in_record

    async def write(self, batch: Sequence[Completion]) -> RecordReport:
        if not self.claims:
            return await self.store.record(batch)
        slots = RecordSlots(self.capacity, self.may_claim)
        started = time.monotonic()  # before the transaction: our view of the lease is early
        try:
            report = await self.store.record(batch, slots)
        except BaseException:
            slots.undo()
            raise
        now, waiting = slots.committed(report.claimed, _destination)
        self.claimed(now, waiting, started)
        return report

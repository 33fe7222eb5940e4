"""Slots: how many calls the pipeline has in flight, per destination and overall.

A slot is taken when a row is claimed and given back when its outcome is recorded, or when
nothing came of it. Between its call's answer and the record, the slot is *held* for the
outcome: the transaction that records it may claim the saga's next step into it (see
``RecordSlots``), so a saga under way goes on without waiting for the claim loop, and that
loop never hands the slot to someone else meanwhile.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field


@dataclass
class Capacity:
    """In-flight calls per destination and overall; a claim only takes free slots.

    Every destination with room under its own limit may claim up to that room (never more
    than the overall room); the claim deals the overall room among the destinations that
    have due rows (``DispatchStore.claim``), so an idle destination holds no slot."""

    limits: Mapping[str, int]
    total_limit: int
    in_flight: dict[str, int] = field(default_factory=dict)

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
        return self.room > 0 and self.in_flight.get(destination, 0) < self.limits.get(
            destination, 0
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

    @property
    def busy(self) -> int:
        return sum(self.in_flight.values())


class RecordSlots:
    """The slots of one record of outcomes (across its retries and splits).

    ``held``: the destinations whose slots the outcomes hold. While the recorder decides,
    ``take`` gives the next dispatch it writes a slot: one held for its own destination, or
    a held one traded for the next destination's if that destination has room, or a free
    one; False when there is none (or claiming is off), and the row is written queued.
    ``decided`` gives back the held slots nobody took (and wakes the claim loop), once. A
    transaction that does not commit gives back what it took (``undo``)."""

    def __init__(
        self,
        capacity: Capacity,
        held: Counter[str],
        claiming: Callable[[], bool],
        wake: Callable[[], None],
    ) -> None:
        self.capacity = capacity
        self.held = held
        self.claiming = claiming
        self.wake = wake
        self.taken: list[str] = []

    def take(self, destination: str) -> bool:
        if not self.claiming():
            return False
        if self.held[destination] > 0:
            self.held[destination] -= 1
        else:
            other = next((d for d, n in self.held.items() if n > 0), None)
            if other is not None:  # trade: the overall count stays the same
                if self.capacity.in_flight.get(destination, 0) >= self.capacity.limits.get(
                    destination, 0
                ):
                    return False
                self.held[other] -= 1
                self.capacity.give_back(other)
                self.capacity.take(destination)
            elif self.capacity.has_room_for(destination):
                self.capacity.take(destination)
            else:
                return False
        self.taken.append(destination)
        return True

    def decided(self) -> None:
        released = False
        for destination, slots in self.held.items():
            for _ in range(slots):
                self.capacity.give_back(destination)
                released = True
        self.held.clear()
        if released:
            self.wake()

    def undo(self) -> None:
        """The transaction that took ``taken`` did not commit: nothing was claimed."""
        self.decided()
        for destination in self.taken:
            self.capacity.give_back(destination)
        if self.taken:
            self.wake()
        self.taken = []

    def committed(self) -> None:
        """What was taken is now a claim's, given back when its own outcome is recorded."""
        self.taken = []

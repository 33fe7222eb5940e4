"""Slots: how many calls the pipeline has in flight, per destination and overall.

A slot is taken when a row is claimed, by the claim loop or by the recorder (which claims a
saga's next step where it writes it, see ``RecordSlots``), and given back when the call ends
or nothing came of the claim. Whoever takes one takes it with no await between the check and
the take; a claim statement reserves the slots it asks for while it runs.
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
        return destination in self.free()

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
    """The slots one record of outcomes claims into (across its retries and splits).

    While the recorder decides, ``take`` gives the next dispatch it writes a free slot of
    its destination's, within that destination's limit and the overall one; False when
    there is none (or claiming is off), and the row is written queued for the claim loop.
    A transaction that does not commit gives back what it took (``undo``)."""

    def __init__(self, capacity: Capacity, claiming: Callable[[], bool]) -> None:
        self.capacity = capacity
        self.claiming = claiming
        self.taken: list[str] = []

    def take(self, destination: str) -> bool:
        if not self.claiming() or not self.capacity.has_room_for(destination):
            return False
        self.capacity.take(destination)
        self.taken.append(destination)
        return True

    def undo(self) -> None:
        """The transaction that took ``taken`` did not commit: nothing was claimed."""
        for destination in self.taken:
            self.capacity.give_back(destination)
        self.taken = []

    def committed(self) -> None:
        """What was taken is now a claim's, given back when its call ends."""
        self.taken = []

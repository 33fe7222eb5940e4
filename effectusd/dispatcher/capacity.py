"""Slots: how many calls the pipeline has in flight, per destination and overall.

A slot is taken when a row is claimed, by the claim loop or by the recorder (which claims a
saga's next step where it writes it, see ``RecordSlots``), and given back when the call ends
or nothing came of the claim. Whoever takes one takes it with no await between the check and
the take; a claim statement reserves the slots it asks for while it runs.

A call that ends in success may have a next step for the recorder to write: its attempt
keeps one unit of the overall room (``held``, not its destination's slot) until its outcome
is recorded, so that the claim loop cannot take it meanwhile; the record that writes the next
step claims it into that unit, and releases the units it did not use.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

Held = tuple[int, int]  # the (dispatch_id, attempt) whose ended call holds a unit of the room


@dataclass
class Capacity:
    """In-flight calls per destination and overall; a claim only takes free slots.

    Every destination with room under its own limit may claim up to that room (never more
    than the overall room); the claim deals the overall room among the destinations that
    have due rows (``DispatchStore.claim``), so an idle destination holds no slot."""

    limits: Mapping[str, int]
    total_limit: int
    in_flight: dict[str, int] = field(default_factory=dict)
    held: set[Held] = field(default_factory=set)  # units of the overall room, for a record

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

    def under_limit(self, destination: str) -> bool:
        """``destination`` may take one more call by its own limit (the overall room aside)."""
        limit = self.limits.get(destination, 0)
        return self.in_flight.get(destination, 0) < limit

    def hold(self, attempt: Held) -> None:
        """Keep one unit of the overall room for the record of ``attempt``'s outcome."""
        self.held.add(attempt)

    def release(self, attempts: Iterable[Held]) -> int:
        """Give back the units ``attempts`` hold (any already given back are skipped);
        returns how many were."""
        held = self.held
        before = len(held)
        held.difference_update(attempts)
        return before - len(held)

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
        return sum(self.in_flight.values()) + len(self.held)


class RecordSlots:
    """The slots one write of outcomes claims into.

    While the recorder decides, ``take`` gives the next dispatch it writes a slot of its
    destination's, within that destination's limit: first a unit of the overall room that
    the write's own completions hold (``held``), else a free one within the overall room;
    False when there is none (or claiming is off), and the row is written queued for the
    claim loop. A transaction that does not commit gives back what it took and the units
    it used are held again (``undo``); one that commits releases the units it did not use
    (``committed``)."""

    def __init__(
        self, capacity: Capacity, claiming: Callable[[], bool], held: Iterable[Held] = ()
    ) -> None:
        self.capacity = capacity
        self.claiming = claiming
        self.held = [attempt for attempt in held if attempt in capacity.held]
        self.taken: list[tuple[str, Held | None]] = []

    def take(self, destination: str) -> bool:
        if not self.claiming():
            return False
        capacity = self.capacity
        used: Held | None = None
        if self.held and capacity.under_limit(destination):
            used = self.held.pop()
            capacity.held.remove(used)
        elif not capacity.has_room_for(destination):
            return False
        capacity.take(destination)
        self.taken.append((destination, used))
        return True

    def undo(self) -> None:
        """The transaction that took ``taken`` did not commit: nothing was claimed."""
        for destination, used in self.taken:
            self.capacity.give_back(destination)
            if used is not None:
                self.capacity.hold(used)
                self.held.append(used)
        self.taken = []

    def committed(self) -> int:
        """What was taken is now a claim's, given back when its call ends; the held units not
        turned into one are released (returns how many)."""
        self.taken = []
        released = self.capacity.release(self.held)
        self.held = []
        return released

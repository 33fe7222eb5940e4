"""Slots shared by the stores one daemon serves (``effectusd.dispatcher.fleet``).

``dispatcher.concurrency`` and each destination's ``max_concurrency`` stay limits of the
process: a destination is one service whatever store its sagas live in. Each store's pipeline
counts its own calls in a ``StoreSlots`` (a ``Capacity``), which checks every limit against the
calls of all the stores together. The room is dealt in turns among the stores that want it: a
store wants slots while its claims find more due rows than they get (or when it finds no room
at all), and while any other store wants them, no store holds more than an equal share of each
limit. When a slot is given back, the stores that want one are woken, so a quiet store's new
saga is claimed at the next call's end of a busy one, not after the busy store's backlog.

One claim asks for at most an equal share among all the stores served, so a store whose
claim hangs (its server gone, its pool waiting out its timeout) holds back no more than that
the first time; after a claim that failed, its claims ask for one row until one works again
(``Pipeline.claim_once``), so a store that is down holds one slot.
A store's claim never waits in the daemon for a slot (``Capacity.may_wait``): a waiting claim
is started by its own store's next call, which a share can hold back past the claim's lease.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from effectusd.dispatcher.capacity import Capacity


def _share(limit: int, contenders: int) -> int:
    """An equal share of ``limit`` among ``contenders`` (rounded up: none is left unused)."""
    return -(-limit // contenders)


class FleetSlots:
    """Every store's slots together, and which stores want more."""

    def __init__(self, limits: Mapping[str, int], total_limit: int) -> None:
        self.limits = limits
        self.total_limit = total_limit
        self.stores: list[StoreSlots] = []
        self.wanting: list[StoreSlots] = []

    def for_store(self, wake: Callable[[], None]) -> StoreSlots:
        """The slots of one more store; ``wake`` wakes its claim loop."""
        store = StoreSlots(self, wake)
        self.stores.append(store)
        return store

    @property
    def busy(self) -> int:
        return sum(store.busy for store in self.stores)

    def in_flight(self, destination: str) -> int:
        return sum(store.in_flight.get(destination, 0) for store in self.stores)

    def contenders(self, store: StoreSlots) -> int:
        """How many stores share the limits as ``store`` sees them: it and those wanting."""
        return len(self.wanting) + (store not in self.wanting)

    def want(self, store: StoreSlots) -> None:
        if store not in self.wanting:
            self.wanting.append(store)

    def satisfied(self, store: StoreSlots) -> None:
        """``store`` got every due row it asked for: the others' shares grow."""
        if store in self.wanting:
            self.wanting.remove(store)
            self.wake_wanting(store)

    def wake_wanting(self, store: StoreSlots) -> None:
        """Wake every store but ``store`` that wants a slot."""
        for other in self.wanting:
            if other is not store:
                other.wake()


class StoreSlots(Capacity):
    """One store's calls in flight, within the fleet's limits and, while other stores want
    slots, within its share of them."""

    def __init__(self, fleet: FleetSlots, wake: Callable[[], None]) -> None:
        super().__init__(limits=fleet.limits, total_limit=fleet.total_limit)
        self.fleet = fleet
        self.wake = wake
        self.last_room = 0  # the room ``free`` saw: the claim that follows asks for no more

    @property
    def room(self) -> int:
        fleet = self.fleet
        share = _share(self.total_limit, fleet.contenders(self))
        return max(min(self.total_limit - fleet.busy, share - self.busy), 0)

    def free(self) -> dict[str, int]:
        """The slots a claim may take now, at most an equal share of each limit among all the
        stores served: a claim holds its slots while it runs, and the claim of a store that
        went down runs until its pool gives up, so it holds no more than its share of the
        others' room meanwhile (a store alone takes the rest with its next claims). None:
        the store wants its turn."""
        fleet = self.fleet
        served = len(fleet.stores)
        room = self.last_room = min(self.room, _share(self.total_limit, served))
        contenders = fleet.contenders(self)
        free: dict[str, int] = {}
        for destination, limit in self.limits.items():
            slots = min(
                limit - fleet.in_flight(destination),
                _share(limit, contenders) - self.in_flight.get(destination, 0),
                _share(limit, served),
                room,
            )
            if slots > 0:
                free[destination] = slots
        if not free:
            fleet.want(self)
        return free

    def has_room_for(self, destination: str) -> bool:
        fleet = self.fleet
        contenders = fleet.contenders(self)
        limit = self.limits.get(destination, 0)
        return (
            fleet.in_flight(destination) < limit
            and fleet.busy < self.total_limit
            and self.in_flight.get(destination, 0) < _share(limit, contenders)
            and self.busy < _share(self.total_limit, contenders)
        )

    def may_wait(self, destination: str) -> bool:
        return False

    def give_back(self, destination: str) -> None:
        super().give_back(destination)
        self.fleet.wake_wanting(self)

    def keep(self, wanted: Mapping[str, int], got: Iterable[str]) -> None:
        """A claim that got fewer rows than it asked for found every due row of this store:
        it wants no more; one that got all may find more (it wants its turn)."""
        got = list(got)
        super().keep(wanted, got)
        if len(got) < min(sum(wanted.values()), self.last_room):
            self.fleet.satisfied(self)
        else:
            self.fleet.want(self)

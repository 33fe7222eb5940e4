"""Slots and held units: a success keeps one unit of the overall room for its record, which
the claim loop cannot take; the record claims into it within the destination's own limit,
gives it back held if it does not commit, and releases what it did not use if it does."""

from __future__ import annotations

from effectusd.dispatcher.capacity import Capacity, RecordSlots


def full(total: int = 2, **limits: int) -> Capacity:
    """A capacity whose every unit but the held ones is in flight at "other"."""
    return Capacity(limits={"dest": 2, "other": 2, **limits}, total_limit=total)


def claiming() -> bool:
    return True


def test_a_held_unit_is_busy_so_the_claim_loop_cannot_take_it() -> None:
    capacity = full()
    capacity.take("dest")
    capacity.give_back("dest")  # the call ended in success...
    capacity.hold((1, 1))  # ...and keeps its unit for its record
    assert (capacity.busy, capacity.room) == (1, 1)
    capacity.hold((2, 1))
    assert capacity.free() == {}


def test_a_record_claims_into_its_own_held_unit_when_no_room_is_free() -> None:
    capacity = full()
    capacity.take("other")
    capacity.hold((1, 1))
    assert capacity.free() == {}
    slots = RecordSlots(capacity, claiming, [(1, 1)])
    assert slots.take("dest") is True
    assert (capacity.in_flight, capacity.held, capacity.busy) == ({"other": 1, "dest": 1}, set(), 2)
    assert slots.take("dest") is False  # one unit held, one taken
    assert slots.committed() == 0
    assert capacity.busy == 2  # the claim's slot, given back when its call ends


def test_a_held_unit_is_used_before_the_free_room() -> None:
    capacity = full(total=3)
    capacity.hold((1, 1))
    slots = RecordSlots(capacity, claiming, [(1, 1)])
    assert slots.take("dest") is True
    assert (capacity.held, capacity.room) == (set(), 2)
    assert slots.take("dest") is True  # then the free room, within the destination's limit
    assert slots.take("dest") is False
    assert slots.committed() == 0 and capacity.busy == 2


def test_a_held_unit_never_passes_its_destinations_own_limit() -> None:
    capacity = full(dest=1)
    capacity.take("dest")
    capacity.hold((1, 1))
    slots = RecordSlots(capacity, claiming, [(1, 1)])
    assert slots.take("dest") is False
    assert slots.take("elsewhere") is False  # a destination with no limit has no slot
    assert slots.committed() == 1  # released: the claim loop may take it
    assert (capacity.busy, capacity.held) == (1, set())


def test_a_record_uses_only_the_units_its_own_completions_hold() -> None:
    capacity = full()
    capacity.take("other")
    capacity.hold((2, 1))  # another record's
    slots = RecordSlots(capacity, claiming, [(1, 1)])  # (1, 1) was released already
    assert slots.take("dest") is False
    assert slots.committed() == 0
    assert capacity.held == {(2, 1)}


def test_a_record_that_does_not_commit_holds_again_the_units_it_used() -> None:
    capacity = full()
    capacity.take("other")
    capacity.hold((1, 1))
    slots = RecordSlots(capacity, claiming, [(1, 1)])
    assert slots.take("dest") is True
    slots.undo()
    assert (capacity.in_flight, capacity.held) == ({"other": 1, "dest": 0}, {(1, 1)})
    # a retry of the same record claims into it again
    again = RecordSlots(capacity, claiming, [(1, 1)])
    assert again.take("dest") is True
    assert again.committed() == 0 and capacity.held == set()


def test_with_claiming_off_a_record_takes_nothing_and_releases_its_units() -> None:
    capacity = full(total=4)
    capacity.hold((1, 1))
    capacity.hold((2, 1))
    slots = RecordSlots(capacity, lambda: False, [(1, 1), (2, 1)])
    assert slots.take("dest") is False
    assert slots.committed() == 2
    assert (capacity.busy, capacity.room) == (0, 4)


def test_a_unit_is_released_once_whoever_releases_it() -> None:
    capacity = full()
    capacity.hold((1, 1))
    assert capacity.release([(1, 1), (3, 1)]) == 1
    assert capacity.release([(1, 1)]) == 0
    assert capacity.busy == 0

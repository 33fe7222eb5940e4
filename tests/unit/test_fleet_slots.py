"""The slots of a daemon serving several stores: the limits are the process's, the room is
dealt in shares among the stores that want it, and a slot given back wakes them."""

from __future__ import annotations

from effectusd.dispatcher.fleet_slots import FleetSlots, StoreSlots


def fleet(total: int = 4, **limits: int) -> tuple[FleetSlots, StoreSlots, StoreSlots, list[str]]:
    woken: list[str] = []
    slots = FleetSlots(limits or {"pay": 4}, total)
    east = slots.for_store(lambda: woken.append("east"))
    west = slots.for_store(lambda: woken.append("west"))
    return slots, east, west, woken


def claim(store: StoreSlots, got: int) -> dict[str, int]:
    """What the pipeline's claim does: ask ``free()``, reserve it, keep ``got`` rows."""
    wanted = store.free()
    store.reserve(wanted)
    store.keep(wanted, ["pay"] * got)
    return wanted


def test_the_limits_count_every_stores_calls() -> None:
    _, east, west, _ = fleet(total=8, pay=3)
    east.reserve({"pay": 3})
    assert west.free() == {}
    assert not west.has_room_for("pay")
    assert west.busy == 0 and east.busy == 3  # each store counts its own calls


def test_a_store_alone_may_take_every_slot_a_share_per_claim() -> None:
    _, east, west, _ = fleet()
    assert claim(east, got=2) == {"pay": 2}
    assert claim(east, got=2) == {"pay": 2}
    assert west.free() == {}


def test_a_store_whose_claim_hangs_holds_no_more_than_its_share() -> None:
    _, east, west, _ = fleet(total=8, pay=4)
    east.reserve(east.free())  # east's server is gone: its claim waits on its pool
    assert east.busy == 2
    assert west.free() == {"pay": 2}  # west's sagas go on meanwhile


def test_a_store_that_finds_no_room_gets_its_share_as_slots_come_back() -> None:
    slots, east, west, woken = fleet()
    claim(east, got=2)
    claim(east, got=2)  # east got all it asked for: it may have more due
    assert west.free() == {}  # west finds no room: it wants its turn
    assert west in slots.wanting
    east.give_back("pay")
    assert woken == ["west"]  # the slot's end wakes the store that wants one
    assert east.free() == {}  # east holds 3 of 4, past its share of 2
    assert not east.has_room_for("pay")
    assert west.free() == {"pay": 1}


def test_a_store_whose_claim_finds_fewer_rows_than_asked_gives_its_share_back() -> None:
    slots, east, west, woken = fleet()
    claim(east, got=2)
    claim(east, got=2)
    west.free()
    east.give_back("pay")
    east.give_back("pay")
    woken.clear()
    claim(west, got=0)  # west's due rows are all claimed: it wants no more
    assert west not in slots.wanting
    assert woken == ["east"]  # east's share grows back: it is woken to use it
    assert east.free() == {"pay": 2}


def test_a_claim_in_a_fleet_never_waits_for_a_slot() -> None:
    _, east, _, _ = fleet()
    east.reserve({"pay": 4})
    assert not east.may_wait("pay")

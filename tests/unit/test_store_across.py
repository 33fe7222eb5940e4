"""Work across several stores (effectusd.store.across), without a database: a store that
cannot be reached is named with its error's class only, the others are served, the console's
stores are asked at once, and any other fault is raised."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import psycopg
import pytest

from effectusd.core.errors import SchemaNotReady
from effectusd.store.across import ambiguous_text, each_store, each_store_async

SECRET = "pa55word-never-shown"


@dataclass(frozen=True)
class Label:
    label: str | None

    @property
    def name(self) -> str:
        return f"store {self.label!r}"


EAST, WEST, DOWN = Label("east"), Label("west"), Label("down")


def refused(_: Label) -> str:
    raise psycopg.OperationalError(f"connection to postgres:{SECRET}@10.0.0.9:5432 refused")


def test_a_store_that_cannot_be_reached_is_named_by_its_class_and_the_others_served() -> None:
    def work(store: Label) -> str:
        if store is DOWN:
            return refused(store)
        if store is WEST:
            raise SchemaNotReady("the schema needs effectusd migrate")
        return "rows"

    done, unreached = each_store([EAST, DOWN, WEST], work)

    assert done == [(EAST, "rows")]
    assert [each.line("read") for each in unreached] == [
        "store 'down' could not be read: OperationalError",
        "store 'west' could not be read: the schema needs effectusd migrate",
    ]


async def test_the_console_asks_every_store_at_once_and_keeps_their_order() -> None:
    east_asked = asyncio.Event()

    async def work(store: Label) -> str:
        if store is WEST:  # answers only once east has been asked: never, one after another
            await east_asked.wait()
            return "west rows"
        if store is DOWN:
            return refused(store)
        east_asked.set()
        return "east rows"

    async with asyncio.timeout(10):
        done, unreached = await each_store_async([WEST, DOWN, EAST], work)

    assert done == [(WEST, "west rows"), (EAST, "east rows")]
    assert [each.store for each in unreached] == [DOWN]
    assert SECRET not in unreached[0].error and "10.0.0.9" not in unreached[0].error


async def test_a_fault_that_is_not_a_store_being_unreached_is_raised() -> None:
    async def work(store: Label) -> str:
        if store is EAST:
            raise KeyError("a bug")
        return "rows"

    with pytest.raises(KeyError):
        await each_store_async([EAST, WEST], work)


def test_an_ambiguous_name_lists_each_candidate_with_its_store() -> None:
    row = {"state": "running", "plan_id": "p", "execution_id": "x"}
    text = ambiguous_text(
        "saga id prefix a",
        [(EAST, [{**row, "saga_id": "a1"}]), (WEST, [{**row, "saga_id": "a2"}])],
        "give more of the saga id",
    )
    first, *lines = text.splitlines()
    assert first == (
        "saga id prefix a is ambiguous: it fits sagas in stores east, west; name one (give "
        "more of the saga id):"
    )
    assert [line.split()[:2] for line in lines] == [["east", "a1"], ["west", "a2"]]

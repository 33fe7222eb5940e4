"""The stores one console serves (docs/operations.md section 10): the single ``[database] url``
as ever, or every store of ``[database.stores]`` (``effectusd console --store LABEL``: one).

With several, each read runs in every store and its rows carry the store's label; a store
that cannot be read is named (never its URL) and the others are shown. A saga is found in
whichever store holds it, by its full id or a unique start of it; a name that fits several
sagas is refused naming each candidate with its store's label (store.across, as the command
line does).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from effectusd.backends import Backend
from effectusd.backends.operation import Operation
from effectusd.config import Config
from effectusd.core.errors import AmbiguousSaga
from effectusd.core.identity import SAGA_ID_CHARS
from effectusd.store import operations
from effectusd.store.across import (
    Done,
    Unreached,
    ambiguous_text,
    each_store_async,
    nowhere_text,
    saga_name,
    unsearched_text,
)

T = TypeVar("T")


class ServedStore(Protocol):
    """One store the console serves: its label (None: the single ``[database] url``), its
    name in a sentence, the configuration with its namespace, and its backend."""

    @property
    def label(self) -> str | None: ...
    @property
    def name(self) -> str: ...
    @property
    def config(self) -> Config: ...
    @property
    def backend(self) -> Backend: ...


@dataclass(frozen=True)
class Served:
    """A store given to the console as it is: the single ``[database] url``'s (no label), or
    one of several by its label."""

    config: Config
    backend: Backend
    label: str | None = None
    name: str = "the database"


class NotLocated(Exception):
    """A saga name the console cannot act on: ``kind`` is ``not_found``, ``ambiguous`` (then
    ``candidates``: each saga it fits, with its store's label) or ``unreached`` (a store that
    could not be searched may hold it, or the store that holds it takes no writes)."""

    def __init__(
        self, kind: str, message: str, candidates: Sequence[Mapping[str, Any]] = ()
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.candidates = list(candidates)


def labelled(store: ServedStore, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with its store's label first (``store``), when the store has one."""
    return data if store.label is None else {"store": store.label, **data}


Unread = dict[str, str]  # label: why that store could not be read


def unread(unreached: Sequence[Unreached[ServedStore]]) -> Unread:
    return {str(each.store.label): each.error for each in unreached}


class Stores:
    """The stores of one console, and the reads and lookups across them."""

    def __init__(self, stores: Sequence[ServedStore]) -> None:
        if not stores:
            raise ValueError("a console serves at least one store")
        self.all = list(stores)
        # The single [database] url: no labels, and a store that fails fails the request.
        self.several = not (len(self.all) == 1 and self.all[0].label is None)

    async def each(
        self, work: Callable[[ServedStore], Awaitable[T]]
    ) -> tuple[Done[ServedStore, T], list[Unreached[ServedStore]]]:
        """``work`` in each store: what each gave, and the stores that could not be read (with
        several; the single store's error is the request's)."""
        if not self.several:
            store = self.all[0]
            return [(store, await work(store))], []
        return await each_store_async(self.all, work)

    async def run_each(
        self, operation: Callable[[ServedStore], Operation[T]]
    ) -> tuple[Done[ServedStore, T], list[Unreached[ServedStore]]]:
        """The operation ``operation`` builds for each store, run in that store."""

        async def run(store: ServedStore) -> T:
            return await store.backend.runner.run_async(operation(store))

        return await self.each(run)

    async def locate(self, name: str) -> tuple[ServedStore, str]:
        """The store holding the saga ``name`` names (a full id or a unique start of one) and
        its full id; NotLocated when none does, or several sagas fit. The single store's full
        id is returned without a search (whoever reads it says if it is not there)."""
        if not self.several and len(name) == SAGA_ID_CHARS:
            return self.all[0], name
        done, unreached = await self.run_each(lambda _: operations.find_sagas(prefix=name))
        holders = [(store, rows) for store, rows in done if rows]
        candidates = [
            labelled(store, {k: str(row[k]) for k in CANDIDATE})
            for store, rows in holders
            for row in rows
        ]
        said = saga_name(name)
        if len(candidates) > 1:
            if self.several:
                text = ambiguous_text(said, holders, "give more of the saga id")
            else:
                text = str(AmbiguousSaga(said, holders[0][1], more=False))
            raise NotLocated("ambiguous", text, candidates)
        if candidates:
            return holders[0][0], str(holders[0][1][0]["saga_id"])
        if unreached:
            raise NotLocated("unreached", unsearched_text(said, done, unreached))
        if self.several:
            raise NotLocated("not_found", nowhere_text(said, self.all))
        missing = f"saga {name} not found" if len(name) == SAGA_ID_CHARS else None
        raise NotLocated("not_found", missing or f"no saga id starts with {name}")


CANDIDATE = ("saga_id", "state", "plan_id", "execution_id")

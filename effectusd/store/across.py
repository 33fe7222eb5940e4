"""Work across several stores (``[database.stores]``, docs/operations.md section 10), for the
command line and the console alike: each store in turn, named by its label (never its URL); a
store that cannot be reached (or read, or written) is named with why, and the others are
still served; a saga is found in whichever store holds it, and a name that fits sagas in
several is refused naming each candidate with its store's label."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from effectusd.backends.errors import UNAVAILABLE, unavailable_text
from effectusd.core.errors import SchemaNotReady
from effectusd.core.identity import SAGA_ID_CHARS
from effectusd.core.replication import ReadOnlyServer


class Labelled(Protocol):
    """A store as messages name it: its label (None for the single ``[database] url``), and
    its name in a sentence (``store 'east'``)."""

    @property
    def label(self) -> str | None: ...

    @property
    def name(self) -> str: ...


S = TypeVar("S", bound=Labelled)
T = TypeVar("T")

# What says a store, not the work, failed: down, not migrated, or taking no writes.
UNREACHED: tuple[type[BaseException], ...] = (*UNAVAILABLE, SchemaNotReady, ReadOnlyServer)


@dataclass(frozen=True)
class Unreached(Generic[S]):
    """A store a command could not read or act on, and why (for a store that could not be
    reached, its error's class and SQLSTATE only: the driver's words may quote the URL)."""

    store: S
    error: str

    @classmethod
    def of(cls, store: S, exc: BaseException) -> Unreached[S]:
        if isinstance(exc, UNAVAILABLE):
            return cls(store, unavailable_text(exc))
        return cls(store, " ".join(str(exc).split()))  # their text quotes no URL

    def line(self, what: str) -> str:
        return f"{self.store.name} could not be {what}: {self.error}"


Done = list[tuple[S, T]]


def each_store(
    stores: Sequence[S], work: Callable[[S], T]
) -> tuple[Done[S, T], list[Unreached[S]]]:
    """``work`` on each store in turn: what each gave, and the stores that were down (or not
    migrated, or read-only for work that writes), which do not stop the others."""
    done: Done[S, T] = []
    unreached: list[Unreached[S]] = []
    for store in stores:
        try:
            done.append((store, work(store)))
        except UNREACHED as exc:
            unreached.append(Unreached.of(store, exc))
    return done, unreached


async def each_store_async(
    stores: Sequence[S], work: Callable[[S], Awaitable[T]]
) -> tuple[Done[S, T], list[Unreached[S]]]:
    """``each_store`` for work that is awaited (the console's), in every store at once: a
    store slow to answer (or to refuse a connection) delays the answer by its own time only,
    not the sum of all. Any error but a store's being unreached is raised."""
    results = await asyncio.gather(*(work(store) for store in stores), return_exceptions=True)
    done: Done[S, T] = []
    unreached: list[Unreached[S]] = []
    for store, result in zip(stores, results, strict=True):
        if isinstance(result, UNREACHED):
            unreached.append(Unreached.of(store, result))
        elif isinstance(result, BaseException):
            raise result
        else:
            done.append((store, result))
    return done, unreached


def candidate_lines(holders: Sequence[tuple[Labelled, Sequence[Mapping[str, Any]]]]) -> list[str]:
    """One line per saga a name fits (find_sagas rows), each with its store's label."""
    return [
        f"  {store.label}  {row['saga_id']}  {row['state']:22} "
        f"{row['plan_id']}/{row['execution_id']}"
        for store, rows in holders
        for row in rows
    ]


def ambiguous_text(
    name: str, holders: Sequence[tuple[Labelled, Sequence[Mapping[str, Any]]]], hint: str
) -> str:
    """Why ``name`` names no one saga: the stores it fits sagas in, ``hint`` (how to name
    one), then each candidate on a line of its own."""
    labels = ", ".join(str(store.label) for store, _ in holders)
    return f"{name} is ambiguous: it fits sagas in stores {labels}; name one ({hint}):\n" + (
        "\n".join(candidate_lines(holders))
    )


def unsearched_text(
    name: str, found: Sequence[tuple[Labelled, object]], unreached: Sequence[Unreached[Any]]
) -> str:
    """Why ``name`` was not found, when some stores could not be searched (it may be there)."""
    searched = ", ".join(str(store.label) for store, _ in found) or "none"
    return f"{name}: not in stores searched ({searched}); " + "; ".join(
        each.line("searched") for each in unreached
    )


def saga_name(name: str) -> str:
    """How messages name the saga a full id or the start of one names."""
    return f"saga {name}" if len(name) == SAGA_ID_CHARS else f"saga id prefix {name}"


def nowhere_text(name: str, stores: Sequence[Labelled]) -> str:
    """Why ``name`` was not found when every store was searched."""
    labels = ", ".join(str(store.label) for store in stores)
    return f"{name}: in none of the stores ({labels})"

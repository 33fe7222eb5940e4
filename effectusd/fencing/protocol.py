"""The fencing port. Acquisition is a store operation run inside the write-ahead
transaction, so a durable provider's grants commit together with ``sent_at``. A provider that
keeps its tokens elsewhere (the fencing authority of several stores) takes them before that
transaction (``grant``) and gives them back after the outcome's record commits (``released``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from effectusd.backends.operation import Operation
from effectusd.core.states import FencingGuarantee, FencingStatus

Grants = tuple[tuple[str, int], ...]


class FenceBusy(Exception):
    """A resource is held by another live holder: known not committed, nothing is sent.
    ``holder``: who holds it, when the provider knows (else the store's lease rows say)."""

    def __init__(self, resource: str, holder: str | None = None) -> None:
        super().__init__(resource)
        self.resource = resource
        self.holder = holder


class AuthorityUnreachable(FenceBusy):
    """The fencing authority could not be asked: nothing is sent, and the dispatch waits
    without the time counting toward ``fencing.wait_limit`` (docs/design.md section 8)."""


@dataclass(frozen=True, slots=True)
class FenceHolder:
    dispatch_id: int
    lease_token: str
    expires_at: datetime  # the dispatch lease's expiry: a dead holder's fence expires with it
    saga_id: str | None = None  # named to a dispatch that finds the resource busy


Wanted = Sequence[tuple[FenceHolder, Sequence[str]]]


class FencingProvider(Protocol):
    guarantee: FencingGuarantee

    @property
    def status(self) -> FencingStatus:
        """What an attempt fenced by this provider may claim before the destination answers."""
        ...

    async def grant(self, wanted: Wanted) -> FencingProvider:
        """Before the write-ahead transaction of a batch with fenced claims: the provider
        whose ``acquire`` hands out this batch's tokens inside it (itself, when the tokens
        are the store's)."""
        ...

    def lock(self, resources: Sequence[str]) -> Operation[None]:
        """Before acquiring for several holders in one transaction: lock all their resources
        in one global order, so two such transactions never wait on each other in a cycle."""
        ...

    def acquire(self, holder: FenceHolder, resources: Sequence[str]) -> Operation[Grants]:
        """Take every resource (given in canonical order) or none: raise FenceBusy."""
        ...

    def release(self, holders: Sequence[tuple[int, str]]) -> Operation[None]:
        """Release what the (dispatch_id, lease_token) holders took, in the transaction that
        records their outcomes."""
        ...

    async def released(self, holders: Sequence[tuple[int, str]]) -> None:
        """After that transaction committed: release what is held elsewhere."""
        ...

    async def readiness(self) -> tuple[bool, str] | None:
        """For /readyz: whether fenced work can be sent now and why (None: nothing to say)."""
        ...

    async def close(self) -> None: ...


class InStore:
    """The part of a provider whose tokens live in the store: nothing before or after the
    store's transactions, and nothing to report or close."""

    async def grant(self, wanted: Wanted) -> FencingProvider:
        return self  # type: ignore[return-value]

    async def released(self, holders: Sequence[tuple[int, str]]) -> None:
        return None

    async def readiness(self) -> tuple[bool, str] | None:
        return None

    async def close(self) -> None:
        return None

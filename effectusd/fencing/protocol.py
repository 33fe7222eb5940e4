"""The fencing port. Acquisition is a store operation run inside the write-ahead
transaction, so a durable provider's grants commit together with ``sent_at``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from effectusd.backends.operation import Operation
from effectusd.core.states import FencingGuarantee, FencingStatus

Grants = tuple[tuple[str, int], ...]


class FenceBusy(Exception):
    """A resource is held by another live holder: known not committed, nothing is sent."""

    def __init__(self, resource: str) -> None:
        super().__init__(resource)
        self.resource = resource


@dataclass(frozen=True, slots=True)
class FenceHolder:
    dispatch_id: int
    lease_token: str
    expires_at: datetime  # the dispatch lease's expiry: a dead holder's fence expires with it


class FencingProvider(Protocol):
    guarantee: FencingGuarantee

    @property
    def status(self) -> FencingStatus:
        """What an attempt fenced by this provider may claim before the destination answers."""
        ...

    def lock(self, resources: Sequence[str]) -> Operation[None]:
        """Before acquiring for several holders in one transaction: lock all their resources
        in one global order, so two such transactions never wait on each other in a cycle."""
        ...

    def acquire(self, holder: FenceHolder, resources: Sequence[str]) -> Operation[Grants]:
        """Take every resource (given in canonical order) or none: raise FenceBusy."""
        ...

    def release(self, holders: Sequence[tuple[int, str]]) -> Operation[None]:
        """Release what the (dispatch_id, lease_token) holders took."""
        ...

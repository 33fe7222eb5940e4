"""In-memory fencing for tests: tokens live and die with the process (local_advisory).

The daemon refuses it unless the config says `fencing.test_setup = true`: it protects
nothing across processes or restarts.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from effectusd.backends.operation import Operation, without_queries
from effectusd.core.states import FencingGuarantee, FencingStatus
from effectusd.fencing.protocol import FenceBusy, FenceHolder, Grants, InStore


class MemoryFencing(InStore):
    guarantee = FencingGuarantee.LOCAL_ADVISORY

    def __init__(self) -> None:
        self.counters: dict[str, int] = {}
        self.leases: dict[str, tuple[int, str, int, datetime]] = {}

    @property
    def status(self) -> FencingStatus:
        return FencingStatus.LOCAL_LOCK_ONLY

    def lock(self, resources: Sequence[str]) -> Operation[None]:
        return without_queries(None)  # one process, one event loop: nothing interleaves

    def acquire(self, holder: FenceHolder, resources: Sequence[str]) -> Operation[Grants]:
        now = datetime.now(UTC)
        mine = (holder.dispatch_id, holder.lease_token)
        for resource in resources:
            lease = self.leases.get(resource)
            if lease and lease[3] > now and (lease[0], lease[1]) != mine:
                raise FenceBusy(resource)
        grants = []
        for resource in resources:
            token = self.counters.get(resource, 0) + 1
            self.counters[resource] = token
            self.leases[resource] = (*mine, token, holder.expires_at)
            grants.append((resource, token))
        return without_queries(tuple(grants))

    def release(self, holders: Sequence[tuple[int, str]]) -> Operation[None]:
        released = set(holders)
        for resource, lease in list(self.leases.items()):
            if (lease[0], lease[1]) in released:
                del self.leases[resource]
        return without_queries(None)

"""Fencing kept by the store itself (PostgreSQL or SQLite): durable_monotonic.

Tokens live in effectus_fencing_counters and only ever increase (a trigger refuses anything
else), across restarts and across every daemon sharing the database. Every grant is also at
least the database clock's floor (migration 10023), so a new store, or an older backup of this
one restored, grants above what the earlier store or the original granted, with nothing to
detect and no step by a person. On PostgreSQL they also rise across a failover to a standby
that missed the last grants: each token carries the server's timeline in its high bits
(migration 10014). On SQLite that is every process on the one host that opens the file. The
layout and its limits: docs/design.md section 8.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from effectusd.backends.operation import Operation
from effectusd.core.states import FencingGuarantee, FencingStatus
from effectusd.fencing.protocol import FenceBusy, FenceHolder, Grants, InStore


class StoreFencing(InStore):
    guarantee = FencingGuarantee.DURABLE_MONOTONIC

    @property
    def status(self) -> FencingStatus:
        return FencingStatus.PROPAGATED

    def lock(self, resources: Sequence[str]) -> Operation[None]:
        if resources:
            yield ("lock_fence_resources", {"resources": sorted(set(resources))})

    def acquire(self, holder: FenceHolder, resources: Sequence[str]) -> Operation[Grants]:
        grants: list[tuple[str, int]] = []
        for resource in resources:
            # One statement per resource takes the lease and the next token, or nothing when
            # another live holder has it (acquire_fence.sql in each store's dialect).
            rows = yield ("acquire_fence", self._acquire_params(holder, resource))
            token = rows[0]["token"] if rows else None
            if token is None:
                # All or none: give back what this holder took. The tokens it used stay
                # spent; a gap in the sequence is harmless, a reused token would not be.
                yield from self.release([(holder.dispatch_id, holder.lease_token)])
                raise FenceBusy(resource)
            grants.append((resource, int(token)))
        return tuple(grants)

    def _acquire_params(self, holder: FenceHolder, resource: str) -> dict[str, Any]:
        return {
            "resource": resource,
            "dispatch_id": holder.dispatch_id,
            "lease_token": holder.lease_token,
            "expires_at": holder.expires_at,
        }

    def release(self, holders: Sequence[tuple[int, str]]) -> Operation[None]:
        if holders:
            yield (
                "release_fences",
                {
                    "dispatch_ids": [dispatch_id for dispatch_id, _ in holders],
                    "lease_tokens": [token for _, token in holders],
                },
            )

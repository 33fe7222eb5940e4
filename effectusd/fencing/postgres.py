"""PostgreSQL fencing: tokens in effectus_fencing_counters only ever increase, across
restarts and across every daemon sharing the database (durable_monotonic)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from effectusd.core.states import FencingGuarantee, FencingStatus
from effectusd.fencing.protocol import FenceBusy, FenceHolder, Grants
from effectusd.store.postgres.queries import sql


class PostgresFencing:
    guarantee = FencingGuarantee.DURABLE_MONOTONIC

    @property
    def status(self) -> FencingStatus:
        return FencingStatus.PROPAGATED

    async def acquire(self, cursor: Any, holder: FenceHolder, resources: Sequence[str]) -> Grants:
        grants: list[tuple[str, int]] = []
        # A savepoint: if one resource is busy, the ones already taken are given back.
        async with cursor.connection.transaction():
            for resource in resources:
                await cursor.execute(
                    sql("acquire_fence"),
                    {
                        "resource": resource,
                        "dispatch_id": holder.dispatch_id,
                        "lease_token": holder.lease_token,
                        "expires_at": holder.expires_at,
                    },
                )
                row = await cursor.fetchone()
                token = row["token"] if isinstance(row, dict) else (row[0] if row else None)
                if token is None:
                    raise FenceBusy(resource)
                grants.append((resource, int(token)))
        return tuple(grants)

    async def release(self, cursor: Any, holders: Sequence[tuple[int, str]]) -> None:
        if holders:
            await cursor.execute(
                sql("release_fences"),
                {
                    "dispatch_ids": [dispatch_id for dispatch_id, _ in holders],
                    "lease_tokens": [token for _, token in holders],
                },
            )

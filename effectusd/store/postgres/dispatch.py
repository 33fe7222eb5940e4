"""The dispatch side of the PostgreSQL store: a connection pool runs the shared operations
(``effectusd.store.dispatch``); the claim is one statement (claim_ready.sql: SKIP LOCKED,
lease, attempt row and timeline event in one round trip)."""

from __future__ import annotations

from typing import Any, TypeVar

from psycopg_pool import AsyncConnectionPool

from effectusd.core.registry import Registry
from effectusd.fencing.protocol import FencingProvider
from effectusd.store.dispatch import DispatchStore, claim_from_row
from effectusd.store.operations import Operation, Rows, one_statement
from effectusd.store.postgres.runner import run_async
from effectusd.store.records import Claim

T = TypeVar("T")


class PostgresDispatchStore(DispatchStore):
    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        registry: Registry,
        owner: str,
        lease_margin_s: float,
        fencing: FencingProvider,
    ) -> None:
        super().__init__(registry, owner, lease_margin_s, fencing)
        self.pool = pool

    async def close(self) -> None:
        await self.pool.close()

    async def _write(self, operation: Operation[T]) -> T:
        async with self.pool.connection() as conn:
            return await run_async(conn, operation)

    async def _write_single(self, operation: Operation[T]) -> T:
        async with self.pool.connection() as conn:
            return await run_async(conn, one_statement(operation), transaction=False)

    async def _read(self, operation: Operation[T]) -> T:
        """Reads are single statements on an autocommit connection: no BEGIN/COMMIT."""
        async with self.pool.connection() as conn:
            return await run_async(conn, operation, transaction=False)

    async def _claim(self, wanted: list[tuple[str, int]], total: int) -> list[Claim]:
        rows = await self._read(
            _claim_ready(
                wanted, total, self.owner, self.lease_margin_s, self.registry.live_limits()
            )
        )
        return [claim_from_row(row) for row in rows]


def _claim_ready(
    wanted: list[tuple[str, int]],
    total: int,
    owner: str,
    margin_s: float,
    live: dict[str, tuple[int, int]],
) -> Operation[Rows]:
    return (yield ("claim_ready", claim_ready_params(wanted, total, owner, margin_s, live)))


def claim_ready_params(
    wanted: list[tuple[str, int]],
    total: int,
    owner: str,
    margin_s: float,
    live: dict[str, tuple[int, int]],
) -> dict[str, Any]:
    """What claim_ready.sql takes: free slots per destination, the overall room, the lease
    owner and margin, and each verb's live call timeout and retry budget."""
    return {
        "destinations": [dest for dest, _ in wanted],
        "limits": [free for _, free in wanted],
        "total": total,
        "owner": owner,
        "margin_s": margin_s,
        "verbs": list(live),
        "timeouts_ms": [timeout for timeout, _ in live.values()],
        "max_attempts": [attempts for _, attempts in live.values()],
    }

"""The dispatch side of the SQLite store: the shared operations run on one connection owned
by one worker thread, so the event loop never blocks on the file. SQLite has one writer at a
time; the daemon's writes are already batched, so one thread loses nothing."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from effectusd.core.registry import Registry
from effectusd.fencing.protocol import FencingProvider
from effectusd.store.dispatch import DispatchStore, claim_from_row, deal_in_turns
from effectusd.store.operations import Operation, event
from effectusd.store.records import Claim
from effectusd.store.sqlite.connection import connect
from effectusd.store.sqlite.runner import run, run_read

T = TypeVar("T")


class SqliteDispatchStore(DispatchStore):
    def __init__(
        self,
        path: str | Path,
        registry: Registry,
        owner: str,
        lease_margin_s: float,
        fencing: FencingProvider,
    ) -> None:
        super().__init__(registry, owner, lease_margin_s, fencing)
        self.path = path
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="effectusd-sqlite")
        self._conn: sqlite3.Connection | None = None
        self._closed = False

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = connect(self.path)
        return self._conn

    async def _write(self, operation: Operation[T]) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, lambda: run(self._connection(), operation))

    async def _read(self, operation: Operation[T]) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._thread, lambda: run_read(self._connection(), operation)
        )

    async def _claim(self, wanted: list[tuple[str, int]], total: int) -> list[Claim]:
        return await self._write(self._claim_due(wanted, total))

    def _claim_due(self, wanted: list[tuple[str, int]], total: int) -> Operation[list[Claim]]:
        """The claim_ready statement of PostgreSQL, in the steps SQLite can do: pick due rows,
        lease them, open an attempt row and log the claim, all under the write lock."""
        candidates: dict[str, list[dict[str, Any]]] = {}
        for destination, limit in wanted:
            candidates[destination] = yield (
                "claim_due",
                {"destination": destination, "limit": limit},
            )
        previous = {row["dispatch_id"]: row["state"] for row in deal_in_turns(candidates, total)}
        if not previous:
            return []
        leased = yield (
            "claim_mark",
            {
                "dispatch_ids": list(previous),
                "owner": self.owner,
                "margin_s": self.lease_margin_s,
                "live": self.registry.live_limits(),
            },
        )
        rows = [{**row, "request_id": str(uuid.uuid4())} for row in leased]
        yield (
            "claim_open_attempt",
            [
                {
                    "dispatch_id": row["dispatch_id"],
                    "attempt": row["attempt"],
                    "request_id": row["request_id"],
                    "owner": self.owner,
                    "lease_token": row["lease_token"],
                    "lease_expires_at": row["lease_expires_at"],
                }
                for row in rows
            ],
        )
        yield (
            "insert_event",
            [
                event(
                    row["saga_id"],
                    "dispatch_claimed",
                    self.owner,
                    effect_id=row["effect_id"],
                    direction=row["direction"],
                    attempt=row["attempt"],
                    from_state=previous[row["dispatch_id"]],
                    to_state="in_flight",
                    detail={"lease_expires_at": row["lease_expires_at"].isoformat()},
                )[1]
                for row in rows
            ],
        )
        return [claim_from_row(row) for row in sorted(rows, key=lambda r: r["dispatch_id"])]

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True

        def close_connection() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        await asyncio.get_running_loop().run_in_executor(self._thread, close_connection)
        self._thread.shutdown(wait=True)

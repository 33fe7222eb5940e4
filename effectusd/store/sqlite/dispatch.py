"""The dispatch side of the SQLite store: the backend's worker thread runs the shared
operations (``effectusd.store.dispatch``) on its one connection; the claim is a few
statements under the write lock."""

from __future__ import annotations

import uuid
from typing import Any, TypeVar

from effectusd.backends.operation import Operation
from effectusd.store.dispatch import DispatchStore, deal_in_turns
from effectusd.store.records import Claim, claim_from_row

T = TypeVar("T")


class SqliteDispatchStore(DispatchStore):
    async def _claim(
        self, wanted: list[tuple[str, int]], total: int, write_ahead: bool
    ) -> list[Claim]:
        """Never written ahead here (``write_ahead`` is ignored): each claim gets its own
        write-ahead transaction."""
        return await self._write(self._claim_due(wanted, total))

    def _claim_due(self, wanted: list[tuple[str, int]], total: int) -> Operation[list[Claim]]:
        """The claim_ready statement of PostgreSQL, in the steps SQLite can do: pick due rows,
        lease them and open an attempt row (the claim's timeline entry, effectusd.core.timeline),
        all under the write lock."""
        candidates: dict[str, list[dict[str, Any]]] = {}
        for destination, limit in wanted:
            candidates[destination] = yield (
                "claim_due",
                {"destination": destination, "limit": limit},
            )
        due = [row["dispatch_id"] for row in deal_in_turns(candidates, total)]
        if not due:
            return []
        leased = yield (
            "claim_mark",
            {
                "dispatch_ids": due,
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
        return [claim_from_row(row) for row in sorted(rows, key=lambda r: r["dispatch_id"])]

"""The dispatch side of the PostgreSQL store: the backend's connection pool runs the shared
operations (``effectusd.store.dispatch``); the claim is one statement (claim_ready.sql: SKIP
LOCKED, lease and attempt row, the claim's timeline entry, in one round trip; for the daemon,
the write-ahead of the unfenced rows too), and the recorder writes the next dispatches it has
slots for already claimed and, unfenced, written ahead (insert_dispatch_claimed.sql)."""

from __future__ import annotations

from typing import Any

from effectusd.backends.operation import Operation, single
from effectusd.backends.postgres.runner import json_rows
from effectusd.store.dispatch import DispatchStore
from effectusd.store.records import Claim, claim_from_row


class PostgresDispatchStore(DispatchStore):
    async def _claim(
        self, wanted: list[tuple[str, int]], total: int, write_ahead: bool
    ) -> list[Claim]:
        params = claim_ready_params(
            wanted,
            total,
            self.owner,
            self.lease_margin_s,
            self.registry.live_limits(),
            self.registry.live_pins(),
            write_ahead=write_ahead,
            namespace=self.namespace,
        )
        rows = await self._read(single("claim_ready", params))
        return [claim_from_row(row) for row in rows]

    claims_in_record = True

    def _insert_claimed(self, rows: list[dict[str, Any]]) -> Operation[list[Claim]]:
        claimed = yield (
            "insert_dispatch_claimed",
            {"rows": json_rows(rows), "owner": self.owner, "margin_s": self.lease_margin_s},
        )
        return [claim_from_row(row) for row in claimed]


def claim_ready_params(
    wanted: list[tuple[str, int]],
    total: int,
    owner: str,
    margin_s: float,
    live: dict[str, tuple[int, int]],
    pins: dict[str, tuple[str, str]],
    *,
    write_ahead: bool = False,
    namespace: str | None = None,
) -> dict[str, Any]:
    """What claim_ready.sql takes: free slots per destination, the overall room, the lease
    owner and margin, each verb's live call timeout, retry budget and the contract hashes it
    pins, whether to write rows ahead in the claim, and the namespace whose rows it claims
    (None: every row). ``pins`` has ``live``'s verbs."""
    return {
        "destinations": [dest for dest, _ in wanted],
        "limits": [free for _, free in wanted],
        "total": total,
        "owner": owner,
        "margin_s": margin_s,
        "verbs": list(live),
        "timeouts_ms": [timeout for timeout, _ in live.values()],
        "max_attempts": [attempts for _, attempts in live.values()],
        "contract_hashes": [pins[verb][0] for verb in live],
        "legacy_hashes": [pins[verb][1] for verb in live],
        "write_ahead": write_ahead,
        "namespace": namespace,
    }

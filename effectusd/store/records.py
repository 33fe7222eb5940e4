"""Records that cross the store boundary on the dispatch path."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from effectusd.core.frozen import frozen
from effectusd.core.states import Delivery, Direction, FencingStatus
from effectusd.store.rows import DELIVERIES, DIRECTIONS


@frozen
class Claim:
    """One leased dispatch, ready to be written ahead and called."""

    dispatch_id: int
    saga_id: str
    effect_id: str
    direction: Direction
    execution_id: str
    destination: str
    verb: str
    contract_hash: str
    delivery: Delivery
    method: str
    path: str
    body: bytes
    args_hash: str
    idempotency_key: str
    fencing_resources: tuple[str, ...]
    timeout_ms: int
    attempt: int
    lease_token: str
    lease_expires_at: datetime
    request_id: str
    db_now: datetime
    created_at: datetime  # when the dispatch row was enqueued (database clock)
    max_attempts: int | None = None  # the budget in force for this attempt (live, see claim)
    fence_waits: int = 0  # earlier attempts that only waited for a busy fencing resource
    # earlier claims that ended before their request was written (fence waits included): the
    # request this claim writes is number attempt - unsent (X-Effectus-Attempt)
    unsent: int = 0
    uncertain_attempt: int | None = None  # an earlier attempt that may have committed
    fence_waiting: bool = False  # a wait for a busy fencing resource is in progress
    # Born written ahead: the claim itself committed "may have been sent" (PostgreSQL, an
    # unfenced row claimed by the daemon, see claim_ready.sql): call it with no write-ahead.
    written_ahead: bool = False

    @property
    def budget_spent(self) -> bool:
        """This attempt would re-send an uncertain attempt past the budget in force (lowered
        in config since the last one). The budget counts requests written (claims that ended
        unsent never count) and bounds only the re-sending of a call whose outcome is unknown:
        a retry of a call never sent or known not committed runs under the time budget."""
        return (
            self.max_attempts is not None
            and self.uncertain_attempt is not None
            and self.request_number > self.max_attempts
        )

    @property
    def request_number(self) -> int:
        """The number of the request this claim writes: X-Effectus-Attempt, and the attempt a
        person sees (claims that ended before their write are not requests)."""
        return self.attempt - self.unsent

    @property
    def lease_seconds(self) -> float:
        """How long the lease runs from the moment of the claim (database clock)."""
        return (self.lease_expires_at - self.db_now).total_seconds()


@frozen
class WriteAhead:
    """The grants to store with ``sent_at`` for one claim (empty when unfenced)."""

    claim: Claim
    grants: tuple[tuple[str, int], ...]
    fencing_status: FencingStatus


def claim_from_row(row: Mapping[str, Any]) -> Claim:
    return Claim(
        dispatch_id=row["dispatch_id"],
        saga_id=row["saga_id"],
        effect_id=row["effect_id"],
        direction=DIRECTIONS[row["direction"]],
        execution_id=row["execution_id"],
        destination=row["destination"],
        verb=row["verb"],
        contract_hash=row["contract_hash"],
        delivery=DELIVERIES[row["delivery"]],
        method=row["method"],
        path=row["path"],
        body=row["args_canonical"].encode("utf-8"),
        args_hash=row["args_hash"],
        idempotency_key=row["idempotency_key"],
        fencing_resources=tuple(row["fencing_resources"]),
        timeout_ms=row["timeout_ms"],
        max_attempts=row["max_attempts"],
        fence_waits=row["fence_waits"],
        unsent=row["unsent"],
        uncertain_attempt=row["uncertain_attempt"],
        fence_waiting=bool(row["fence_waiting"]),
        attempt=row["attempt"],
        lease_token=str(row["lease_token"]),
        lease_expires_at=row["lease_expires_at"],
        request_id=str(row["request_id"]),
        db_now=row["db_now"],
        created_at=row["created_at"],
        written_ahead=bool(row.get("written_ahead")),
    )

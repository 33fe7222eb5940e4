"""Records that cross the store boundary on the dispatch path."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from effectusd.core.states import Delivery, Direction, FencingStatus


@dataclass(frozen=True, slots=True)
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

    @property
    def budget_spent(self) -> bool:
        """This attempt is past the budget in force (lowered in config since the last one);
        attempts that only waited for a fencing resource never count."""
        return self.max_attempts is not None and self.attempt - self.fence_waits > self.max_attempts

    @property
    def lease_seconds(self) -> float:
        """How long the lease runs from the moment of the claim (database clock)."""
        return (self.lease_expires_at - self.db_now).total_seconds()


@dataclass(frozen=True, slots=True)
class WriteAhead:
    """The grants to store with ``sent_at`` for one claim (empty when unfenced)."""

    claim: Claim
    grants: tuple[tuple[str, int], ...]
    fencing_status: FencingStatus

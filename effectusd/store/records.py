"""Records that cross the store boundary on the dispatch path."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
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


@frozen
class SlotBudget:
    """The slots a record transaction may claim the next steps it writes into: reserved by the
    daemon before the transaction begins, a plain value the store reads (never calls back).

    ``claim``: per destination, how many new dispatches may be written claimed into a slot of
    its own, and at most ``total`` in all. ``wait``: per destination, how many more may be
    written claimed to wait in the daemon for its next free slot once its ``claim`` is used up,
    each one a row that ``may_wait_for_slot`` (set only where the destination is then at its
    own limit). What the transaction does not use, the daemon gives back, commit or not."""

    claim: Mapping[str, int] = field(default_factory=dict)
    total: int = 0
    wait: Mapping[str, int] = field(default_factory=dict)


class Spending:
    """What one record transaction takes of its ``SlotBudget``, row by row (a transaction
    repeated after a transient fault spends the budget afresh)."""

    __slots__ = ("left", "places", "slots")

    def __init__(self, budget: SlotBudget) -> None:
        self.slots = dict(budget.claim)
        self.places = dict(budget.wait)
        self.left = budget.total

    def take(self, destination: str, may_wait: bool) -> bool:
        """Whether the next new dispatch to ``destination`` is written claimed: into a slot
        while the destination's and the overall ones last, else, where the row ``may_wait``
        and the destination's own slots are all taken, into a place waiting for one."""
        slots = self.slots.get(destination, 0)
        if slots > 0 and self.left > 0:
            self.slots[destination] = slots - 1
            self.left -= 1
            return True
        places = self.places.get(destination, 0)
        if may_wait and slots == 0 and places > 0:
            self.places[destination] = places - 1
            return True
        return False


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

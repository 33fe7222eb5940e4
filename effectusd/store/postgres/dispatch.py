"""The dispatch side of the PostgreSQL store: claim, reclaim, write-ahead, record.

Each method is one transaction. Decisions come from ``effectusd.core.engine``; this module
reads the facts under lock, asks the engine, and writes what it says.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from effectusd import faults
from effectusd.core.canonical import canonical_text
from effectusd.core.engine import (
    Completion,
    SagaFacts,
    StepFacts,
    Transition,
    as_settled_late,
    late_completion_settles,
    settle,
)
from effectusd.core.plan import CheckedPlan
from effectusd.core.registry import Registry
from effectusd.core.states import (
    Delivery,
    Direction,
    DispatchState,
    FencingStatus,
    OutcomeClass,
    SagaState,
    StepState,
)
from effectusd.fencing.protocol import FenceBusy, FenceHolder, FencingProvider
from effectusd.store.postgres.queries import sql
from effectusd.store.records import Claim, WriteAhead
from effectusd.store.rows import TransitionRows, batches, dispatch_facts

Cursor = psycopg.AsyncCursor[dict[str, Any]]


@dataclass
class RecordReport:
    applied: int = 0
    late: int = 0
    dropped: int = 0
    deferred: list[Completion] = field(default_factory=list)
    # (completion, transition, the dispatch row it applied to)
    transitions: list[tuple[Completion, Transition, dict[str, Any]]] = field(default_factory=list)
    notified: set[str] = field(default_factory=set)


class PostgresDispatchStore:
    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        registry: Registry,
        owner: str,
        lease_margin_s: float,
        fencing: FencingProvider,
    ) -> None:
        self.pool = pool
        self.fencing = fencing
        self.registry = registry
        self.owner = owner
        self.lease_margin_s = lease_margin_s
        self._plans: dict[str, CheckedPlan] = {}

    # -- 1. claim --------------------------------------------------------------------------
    async def claim(self, capacity: dict[str, int]) -> list[Claim]:
        wanted = [(dest, free) for dest, free in capacity.items() if free > 0]
        if not wanted:
            return []
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                sql("claim_ready"),
                {
                    "destinations": [dest for dest, _ in wanted],
                    "limits": [free for _, free in wanted],
                    "owner": self.owner,
                    "margin_s": self.lease_margin_s,
                },
            )
            rows = await cur.fetchall()
        return [_claim_from_row(row) for row in rows]

    # -- 2. reclaim expired leases ----------------------------------------------------------
    async def reclaim_expired(self, limit: int = 100) -> RecordReport:
        """Settle attempts whose lease ran out: not sent → known not committed; sent → unknown."""
        async with self.pool.connection() as conn, conn.transaction():
            async with conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(sql("select_expired_leases"), {"limit": limit})
                expired = await cur.fetchall()
                completions = [
                    Completion(
                        dispatch_id=row["dispatch_id"],
                        attempt=row["attempt"],
                        lease_token=str(row["lease_token"]),
                        outcome=(
                            OutcomeClass.UNKNOWN
                            if row["sent_at"] is not None
                            else OutcomeClass.RETRYABLE
                        ),
                        settled_by="reclaim",
                        error=(
                            f"lease of {row['lease_owner']} expired "
                            + (
                                "after the call may have been sent"
                                if row["sent_at"]
                                else "before anything was sent"
                            )
                        ),
                        actor=self.owner,
                    )
                    for row in expired
                ]
                if not completions:
                    return RecordReport()
                return await self._record_in(cur, completions)

    # -- 3. write-ahead ----------------------------------------------------------------------
    async def write_ahead(
        self, claims: Sequence[Claim]
    ) -> tuple[list[WriteAhead], list[Completion]]:
        """Take fencing tokens and mark each claim sent, in one transaction.

        Returns the claims that may now be called, and known-not-committed completions for
        claims whose fencing resources are held by another live dispatch.
        """
        ready: list[WriteAhead] = []
        busy: list[Completion] = []
        async with self.pool.connection() as conn, conn.transaction():
            async with conn.cursor(row_factory=dict_row) as cur:
                for claim in claims:
                    if not claim.fencing_resources:
                        ready.append(WriteAhead(claim, (), FencingStatus.NOT_REQUESTED.value))
                        continue
                    holder = FenceHolder(
                        claim.dispatch_id, claim.lease_token, claim.lease_expires_at
                    )
                    try:
                        grants = await self.fencing.acquire(cur, holder, claim.fencing_resources)
                    except FenceBusy as busy_resource:
                        busy.append(
                            Completion(
                                dispatch_id=claim.dispatch_id,
                                attempt=claim.attempt,
                                lease_token=claim.lease_token,
                                outcome=OutcomeClass.RETRYABLE,
                                settled_by="guard",
                                error=(
                                    f"fencing resource {busy_resource.resource!r} is held by "
                                    "another live dispatch; nothing was sent"
                                ),
                                actor=self.owner,
                            )
                        )
                    else:
                        ready.append(WriteAhead(claim, grants, self.fencing.status.value))
                if not ready:
                    return [], busy
                await cur.execute(
                    sql("write_ahead"),
                    {
                        "dispatch_ids": [w.claim.dispatch_id for w in ready],
                        "attempts": [w.claim.attempt for w in ready],
                        "lease_tokens": [w.claim.lease_token for w in ready],
                        "grants": [grants_json(w.grants) for w in ready],
                        "fencing_statuses": [w.fencing_status for w in ready],
                    },
                )
                marked = {row["dispatch_id"] for row in await cur.fetchall()}
        return [w for w in ready if w.claim.dispatch_id in marked], busy

    # -- 5. record outcomes (group commit) ---------------------------------------------------
    async def record(self, completions: Sequence[Completion]) -> RecordReport:
        async with (
            self.pool.connection() as conn,
            conn.transaction(),
            conn.cursor(row_factory=dict_row) as cur,
        ):
            report = await self._record_in(cur, completions)
            faults.point("during_record")
            return report

    async def _record_in(self, cur: Cursor, completions: Sequence[Completion]) -> RecordReport:
        report = RecordReport()
        ids = sorted({c.dispatch_id for c in completions})
        await cur.execute(sql("lock_sagas_of_dispatches"), {"dispatch_ids": ids})
        sagas = {row["saga_id"]: row for row in await cur.fetchall()}
        await cur.execute(sql("lock_dispatches"), {"dispatch_ids": ids})
        dispatches = {row["dispatch_id"]: row for row in await cur.fetchall()}
        await cur.execute(
            sql("select_completion_attempts"),
            {
                "dispatch_ids": [c.dispatch_id for c in completions],
                "attempts": [c.attempt for c in completions],
            },
        )
        attempts = {(row["dispatch_id"], row["attempt"]): row for row in await cur.fetchall()}
        await cur.execute(sql("select_steps_of_sagas"), {"saga_ids": list(sagas)})
        steps: dict[str, dict[str, StepFacts]] = {}
        for row in await cur.fetchall():
            steps.setdefault(row["saga_id"], {})[row["effect_id"]] = StepFacts(
                row["effect_id"], row["sequence"], StepState(row["state"]), row["result"]
            )

        writes = TransitionRows()
        touched: set[str] = set()
        for completion in completions:
            drow = dispatches.get(completion.dispatch_id)
            attempt_row = attempts.get((completion.dispatch_id, completion.attempt))
            if drow is None or attempt_row is None:
                report.dropped += 1
                continue
            if drow["saga_id"] in touched:
                report.deferred.append(completion)  # one transition per saga per batch
                continue
            dispatch = dispatch_facts(drow)
            guard_holds = (
                drow["state"] == DispatchState.IN_FLIGHT.value
                and drow["attempt"] == completion.attempt
                and str(drow["lease_token"]) == completion.lease_token
                and (completion.settled_by != "reclaim" or drow["lease_expired"])
            )
            if not guard_holds:
                if completion.settled_by == "reclaim":
                    report.dropped += 1  # the holder finished first: nothing to reclaim
                    continue
                if attempt_row["settled_by"] == completion.settled_by == "executor":
                    report.dropped += 1  # our own earlier commit went through after all
                    continue
                if not late_completion_settles(completion, dispatch, attempt_row["later_sent"]):
                    writes.late(completion)
                    report.late += 1
                    continue
                writes.late(completion)
                dispatch = as_settled_late(dispatch, completion)
            saga_row = sagas[drow["saga_id"]]
            transition = settle(
                completion,
                dispatch,
                self._saga_facts(saga_row, steps.get(drow["saga_id"], {})),
                self.registry,
                random.random(),
            )
            touched.add(drow["saga_id"])
            writes.apply(completion, drow, transition)
            report.applied += 1
            report.transitions.append((completion, transition, drow))
        await flush(cur, writes)
        await self.fencing.release(cur, writes.released)
        report.notified = writes.destinations
        return report

    def _saga_facts(self, row: dict[str, Any], steps: dict[str, StepFacts]) -> SagaFacts:
        plan = self._plans.get(row["plan_digest"])
        if plan is None:
            plan = CheckedPlan.model_validate(row["plan"])
            self._plans[row["plan_digest"]] = plan
        return SagaFacts(
            saga_id=row["saga_id"],
            namespace=row["namespace"],
            execution_id=row["execution_id"],
            state=SagaState(row["state"]),
            cancel_requested=row["cancel_requested"],
            plan=plan,
            facts=row["facts"],
            steps=steps,
        )

    async def seconds_until_due(self, destinations: list[str]) -> float | None:
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(sql("next_due"), {"destinations": destinations})
            row = await cur.fetchone()
        return None if row is None or row["seconds"] is None else float(row["seconds"])

    async def outbox_counts(self, horizon_s: float) -> tuple[int, int]:
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(sql("outbox_counts"), {"horizon_s": horizon_s})
            row = await cur.fetchone()
        assert row is not None
        return int(row["in_flight"]), int(row["due_soon"])


def grants_json(grants: Iterable[tuple[str, int]]) -> str:
    return canonical_text([{"resource": r, "token": t} for r, t in sorted(grants)])


async def flush(cur: Cursor, rows: TransitionRows) -> None:
    """Send a batch's statements with executemany (pipelined), then its notifications."""
    for name, params in batches(rows):
        if params:
            await cur.executemany(sql(name), params)
    for destination in sorted(rows.destinations):
        await cur.execute(sql("notify_outbox"), {"destination": destination})


def _claim_from_row(row: dict[str, Any]) -> Claim:
    return Claim(
        dispatch_id=row["dispatch_id"],
        saga_id=row["saga_id"],
        effect_id=row["effect_id"],
        direction=Direction(row["direction"]),
        execution_id=row["execution_id"],
        destination=row["destination"],
        verb=row["verb"],
        contract_hash=row["contract_hash"],
        delivery=Delivery(row["delivery"]),
        method=row["method"],
        path=row["path"],
        body=row["args_canonical"].encode("utf-8"),
        args_hash=row["args_hash"],
        idempotency_key=row["idempotency_key"],
        fencing_resources=tuple(row["fencing_resources"]),
        timeout_ms=row["timeout_ms"],
        attempt=row["attempt"],
        lease_token=str(row["lease_token"]),
        lease_expires_at=row["lease_expires_at"],
        request_id=str(row["request_id"]),
        db_now=row["db_now"],
        created_at=row["created_at"],
    )

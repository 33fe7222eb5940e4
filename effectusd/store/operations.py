"""Store operations written once, run by a sync or an async runner.

An operation is a generator that yields ``(query_name, params)`` and receives the rows
(as dicts). The runner executes the named statement of its own store inside one transaction.
That keeps the client's sync and async APIs, and later stores, on one piece of logic.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from effectusd.core.canonical import canonical_text
from effectusd.core.submission import SubmitConflict, SubmitRows, conflict_with_existing
from effectusd.core.views import SagaView, build_saga_view

T = TypeVar("T")
Rows = list[dict[str, Any]]
Query = tuple[str, Mapping[str, Any]]
Operation = Generator[Query, Rows, T]


@dataclass(frozen=True)
class SubmitResult:
    saga_id: str
    created: bool


def event(
    saga_id: str,
    kind: str,
    actor: str,
    *,
    effect_id: str | None = None,
    direction: str | None = None,
    attempt: int | None = None,
    from_state: str | None = None,
    to_state: str | None = None,
    evidence: str | None = None,
    detail: Mapping[str, Any] | None = None,
) -> Query:
    return (
        "insert_event",
        {
            "saga_id": saga_id,
            "effect_id": effect_id,
            "direction": direction,
            "attempt": attempt,
            "kind": kind,
            "from_state": from_state,
            "to_state": to_state,
            "actor": actor,
            "evidence": evidence,
            "detail": canonical_text(dict(detail or {})),
        },
    )


def submit(rows: SubmitRows, actor: str, not_before: datetime | None) -> Operation[SubmitResult]:
    inserted = yield (
        "insert_saga",
        {
            "saga_id": rows.saga_id,
            "namespace": rows.namespace,
            "execution_id": rows.execution_id,
            "plan_id": rows.plan_id,
            "plan_digest": rows.plan_digest,
            "plan": rows.plan,
            "facts": rows.facts,
            "facts_hash": rows.facts_hash,
        },
    )
    if not inserted:
        existing = yield ("select_saga_identity", {"saga_id": rows.saga_id})
        reason = conflict_with_existing(rows, existing[0]["plan_digest"], existing[0]["facts_hash"])
        if reason is not None:
            raise SubmitConflict(reason)
        return SubmitResult(rows.saga_id, created=False)
    for step in rows.steps:
        yield ("insert_step", asdict(step))
    dispatch = rows.first_dispatch
    yield (
        "start_step",
        {
            "saga_id": rows.saga_id,
            "effect_id": dispatch.effect_id,
            "args": rows.first_step_args,
            "args_hash": rows.first_step_args_hash,
        },
    )
    params = asdict(dispatch)
    params["fencing_resources"] = canonical_text(dispatch.fencing_resources)
    if not_before is not None and not_before.tzinfo is None:
        not_before = not_before.replace(tzinfo=UTC)  # naive times are UTC, as on the CLI
    params["not_before"] = not_before
    yield ("insert_dispatch", params)
    yield event(
        rows.saga_id,
        "saga_submitted",
        actor,
        to_state="running",
        detail={"plan_id": rows.plan_id, "plan_digest": rows.plan_digest},
    )
    yield event(
        rows.saga_id,
        "dispatch_enqueued",
        actor,
        effect_id=dispatch.effect_id,
        direction=dispatch.direction,
        to_state="queued",
        detail={"idempotency_key": dispatch.idempotency_key, "args_hash": dispatch.args_hash},
    )
    yield ("notify_outbox", {"destination": dispatch.destination})
    return SubmitResult(rows.saga_id, created=True)


def load_saga(saga_id: str) -> Operation[SagaView | None]:
    params = {"saga_id": saga_id}
    saga = yield ("select_saga", params)
    if not saga:
        return None
    steps = yield ("select_saga_steps", params)
    dispatches = yield ("select_saga_dispatches", params)
    attempts = yield ("select_saga_attempts", params)
    events = yield ("select_saga_events", params)
    return build_saga_view(saga[0], steps, dispatches, attempts, events)


def list_sagas(
    state: str | None = None,
    plan_id: str | None = None,
    namespace: str | None = None,
    limit: int = 100,
    older_than: timedelta | None = None,
) -> Operation[Rows]:
    rows = yield (
        "list_sagas",
        {
            "state": state,
            "plan_id": plan_id,
            "namespace": namespace,
            "limit": limit,
            "older_than_s": None if older_than is None else older_than.total_seconds(),
        },
    )
    return rows

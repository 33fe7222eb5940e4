"""Store operations written once (``effectusd.backends.operation``), run by any backend.

Each yields the names of the store's statements (sql/<dialect>/store/NAME.sql); the
backend runs them in its dialect inside one transaction. That keeps the client's sync and
async APIs, and every store, on one piece of logic.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Generator, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from effectusd.backends.operation import Operation, Query, Rows
from effectusd.core.canonical import canonical_text
from effectusd.core.errors import AmbiguousSaga
from effectusd.core.graph import dependencies
from effectusd.core.identity import SAGA_ID_CHARS, saga_id_prefix
from effectusd.core.identity import saga_id as derive_saga_id
from effectusd.core.plan import CheckedPlan
from effectusd.core.states import BLOCKED_SAGA_STATES
from effectusd.core.submission import (
    SubmitConflict,
    SubmitRows,
    conflict_with_existing,
    pruned_identity,
)
from effectusd.core.timeline import Submitted, outbox_columns, timeline
from effectusd.core.transition import Event
from effectusd.core.views import SagaView, build_saga_view
from effectusd.store.rows import event_params, plan_steps

T = TypeVar("T")


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
) -> tuple[str, dict[str, Any]]:
    """The insert_event statement of an operator's event (rows.event_params builds the row)."""
    appended = Event(
        kind, effect_id, direction, attempt, from_state, to_state, actor, evidence, detail or {}
    )
    return ("insert_event", event_params(saga_id, appended))


def _saga_params(rows: SubmitRows, trace_context: str | None) -> dict[str, Any]:
    return {
        "saga_id": rows.saga_id,
        "namespace": rows.namespace,
        "execution_id": rows.execution_id,
        "plan_id": rows.plan_id,
        "plan_digest": rows.plan_digest,
        "plan": rows.plan,
        "facts": rows.facts,
        "facts_hash": rows.facts_hash,
        "trace_context": trace_context,
    }


def _submission_writes(
    batch: Sequence[SubmitRows], actor: str, not_before: datetime | None
) -> Generator[Query, Rows, None]:
    """Everything a new saga writes after its saga row, for a whole batch: each statement once
    with all its parameter rows (insert_dispatch wakes each destination it writes to)."""
    if not_before is not None and not_before.tzinfo is None:
        not_before = not_before.replace(tzinfo=UTC)  # naive times are UTC, as on the CLI
    dispatches, events = [], []
    for rows in batch:
        submitted = Event(
            "saga_submitted",
            to_state="running",
            actor=actor,
            detail={"plan_id": rows.plan_id, "plan_digest": rows.plan_digest},
        )
        events.append(event_params(rows.saga_id, submitted))
        # the outbox rows carry their enqueues' timeline entries (effectusd/core/timeline.py)
        carried = Submitted(actor)
        for dispatch in rows.first_dispatches:  # every root of the plan's graph
            # its step is in progress from here: read from this row (core.steps.step_state)
            params = asdict(dispatch)
            params["fencing_resources"] = canonical_text(dispatch.fencing_resources)
            params["not_before"] = not_before
            outbox_columns(carried, None, params)  # no step move carried
            dispatches.append(params)
    # no step rows: a step is read from the pinned plan and its dispatches (migration 10018)
    yield ("insert_dispatch", dispatches)
    yield ("insert_event", events)


def _refuse_unless_same(rows: SubmitRows, found: Rows) -> None:
    """Raise unless ``found`` (select_saga_identity rows) is this very saga, alive."""
    if not found:
        # the saga that kept ours out was deleted before we could read it
        raise SubmitConflict(f"saga {rows.saga_id} was deleted while this submit ran; submit again")
    existing = min(found, key=lambda row: row["pruned_at"] is not None)  # a live saga first
    if existing["pruned_at"] is not None:
        raise pruned_identity(
            rows, existing["state"], existing["finished_at"], existing["pruned_at"]
        )
    reason = conflict_with_existing(rows, existing["plan_digest"], existing["facts_hash"])
    if reason is not None:
        raise SubmitConflict(reason)


def submit(
    rows: SubmitRows, actor: str, not_before: datetime | None, trace_context: str | None = None
) -> Operation[SubmitResult]:
    """``trace_context``: the submitter's trace context (``effectusd.tracing.capture``)."""
    inserted = yield ("insert_saga", _saga_params(rows, trace_context))
    if not inserted:
        found = yield ("select_saga_identity", {"saga_id": rows.saga_id})
        _refuse_unless_same(rows, found)
        return SubmitResult(rows.saga_id, created=False)
    yield from _submission_writes([rows], actor, not_before)
    return SubmitResult(rows.saga_id, created=True)


def submit_many(
    batch: Sequence[SubmitRows],
    actor: str,
    not_before: datetime | None,
    trace_context: str | None = None,
) -> Operation[list[SubmitResult]]:
    """Submit many sagas in one transaction and a fixed number of statements. All or nothing:
    one conflict (with a stored saga or within the batch) raises and writes nothing."""
    ids = sorted({rows.saga_id for rows in batch})
    known: dict[str, Rows] = {}
    for row in (yield ("select_saga_identities", {"saga_ids": ids})):
        known.setdefault(row["saga_id"], []).append(row)
    results, fresh = [], []
    for rows in batch:
        if rows.saga_id in known:
            _refuse_unless_same(rows, known[rows.saga_id])
            results.append(SubmitResult(rows.saga_id, created=False))
            continue
        known[rows.saga_id] = [
            {"plan_digest": rows.plan_digest, "facts_hash": rows.facts_hash, "pruned_at": None}
        ]
        fresh.append(rows)
        results.append(SubmitResult(rows.saga_id, created=True))
    if fresh:
        # A plain insert: a saga submitted concurrently by someone else between our read and
        # this write makes the whole batch fail (and write nothing) instead of half-apply.
        yield ("insert_sagas", [_saga_params(rows, trace_context) for rows in fresh])
        yield from _submission_writes(fresh, actor, not_before)
    return results


# The states lock_sagas.sql gives a compensation reason in: every blocked one, from SagaState
# (a state added later included), sent as a parameter so that no statement lists them by hand.
BLOCKED_STATES = sorted(state.value for state in BLOCKED_SAGA_STATES)


def lock_sagas_params(
    *,
    saga_ids: Sequence[str] = (),
    dispatch_ids: Sequence[int] = (),
    known_plans: Collection[str] = (),
) -> dict[str, Any]:
    """lock_sagas.sql's parameters: the sagas ``saga_ids`` names, or those of
    ``dispatch_ids``; a saga whose plan digest is in ``known_plans`` comes without its plan."""
    return {
        "saga_ids": list(saga_ids),
        "dispatch_ids": list(dispatch_ids),
        "known_plans": list(known_plans),
        "blocked_states": BLOCKED_STATES,
    }


def lock_sagas(
    *,
    saga_ids: Sequence[str] = (),
    dispatch_ids: Sequence[int] = (),
    known_plans: Collection[str] = (),
) -> Operation[Rows]:
    """Lock saga rows, in id order (lock_sagas.sql: where every settlement starts)."""
    params = lock_sagas_params(
        saga_ids=saga_ids, dispatch_ids=dispatch_ids, known_plans=known_plans
    )
    return (yield ("lock_sagas", params))


def load_saga(saga_id: str) -> Operation[SagaView | None]:
    params = {"saga_id": saga_id}
    saga = yield ("select_saga", params)
    if not saga:
        return None
    step_rows = yield ("select_steps_of_sagas", {"saga_ids": [saga_id]})
    dispatches = yield ("select_saga_dispatches", params)
    attempts = yield ("select_saga_attempts", params)
    events = yield ("select_saga_events", params)
    steps = plan_step_rows(saga[0]["plan"], step_rows, dispatches)
    return build_saga_view(saga[0], steps, dispatches, attempts, timeline(events))


def saga_plan(saga_id: str) -> Operation[CheckedPlan | None]:
    """The checked plan ``saga_id`` pinned; None when there is no such saga."""
    saga = yield ("select_saga", {"saga_id": saga_id})
    return _checked_plan(saga[0]["plan"]) if saga else None


def _checked_plan(plan: Any) -> CheckedPlan:
    """A saga row's plan column (a document, or its JSON text) as its checked plan."""
    return CheckedPlan.model_validate(json.loads(plan) if isinstance(plan, str) else plan)


def plan_step_rows(plan: Any, step_rows: Rows, dispatches: Rows) -> Rows:
    """The saga's steps as the views show them, as its pinned ``plan`` lists them: each
    with its state, result and order of success (``effectusd.store.rows.plan_steps``), its
    resolved arguments' hash (its forward dispatch's) and ``after``, the ids of the steps it
    runs after, made explicit (a step without `after` runs after the one before it)."""
    checked = _checked_plan(plan)
    facts = plan_steps(checked, step_rows)
    deps = dependencies(checked.steps)
    args = {d["effect_id"]: d["args_hash"] for d in dispatches if d["direction"] == "forward"}
    return [
        {
            "effect_id": step.id,
            "sequence": step.sequence,
            "verb": step.verb,
            "contract_hash": step.contract_hash,
            "compensation": step.compensate,
            "state": facts[step.id].state,
            "args_hash": args.get(step.id),
            "result": facts[step.id].result,
            "succeeded_order": facts[step.id].succeeded_order,
            "after": list(deps.get(step.id, ())),
        }
        for step in checked.steps
    ]


FIND_LIMIT = 10  # enough to show an operator why a name is ambiguous


def find_sagas(
    *,
    prefix: str | None = None,
    namespace: str | None = None,
    execution_id: str | None = None,
    plan_id: str | None = None,
) -> Operation[Rows]:
    """Sagas (id, execution, plan, state) named by an id prefix, or by an execution id in a
    namespace (and a plan id); at most FIND_LIMIT of them."""
    if prefix is not None:
        return (yield ("find_sagas_by_prefix", {"prefix": prefix, "limit": FIND_LIMIT}))
    params = {
        "namespace": namespace,
        "execution_id": execution_id,
        "plan_id": plan_id,
        "limit": FIND_LIMIT,
    }
    return (yield ("find_sagas_by_execution", params))


def locate_saga(
    saga_id: str | None,
    *,
    namespace: str = "",
    execution_id: str | None = None,
    plan_id: str | None = None,
) -> Operation[str | None]:
    """The one saga id the arguments name, or None when no saga can have it. ``saga_id`` is a
    full id or the unique start of one as a person writes it (``saga_id_prefix``: the
    shortened id `sagas list` prints); else ``execution_id`` in ``namespace``, with its
    ``plan_id`` unless only one plan ran under it. A full id, or an execution id with its
    plan, is returned without reading (the saga may not exist). AmbiguousSaga when a prefix,
    or an execution id without its plan, names several: one resolution for the client, the
    command line and the operator commands."""
    if (saga_id is None) == (execution_id is None):
        raise TypeError("name the saga by saga_id (or a unique prefix) or by execution_id")
    if saga_id is not None:
        wanted = saga_id_prefix(saga_id)
        if wanted is None or len(wanted) == SAGA_ID_CHARS:
            return wanted
        rows = yield from find_sagas(prefix=wanted)
        name = f"saga id prefix {wanted}"
    else:
        assert execution_id is not None
        if plan_id is not None:
            return derive_saga_id(namespace, execution_id, plan_id)
        rows = yield from find_sagas(namespace=namespace, execution_id=execution_id)
        name = f"execution id {execution_id!r}"
    if len(rows) > 1:
        raise AmbiguousSaga(name, rows, more=len(rows) >= FIND_LIMIT)
    return str(rows[0]["saga_id"]) if rows else None


def saga_identity(saga_id: str) -> Operation[Rows]:
    """The saga's identity row, or its tombstone's (pruned_at set), or nothing."""
    return (yield ("select_saga_identity", {"saga_id": saga_id}))


def list_sagas(
    state: str | None = None,
    plan_id: str | None = None,
    namespace: str | None = None,
    limit: int = 100,
    older_than: timedelta | None = None,
    *,
    execution_id: str | None = None,
    destination: str | None = None,
    states: Collection[str] | None = None,
) -> Operation[Rows]:
    """Sagas newest first, by any of: state (or any of ``states``), plan, namespace,
    execution id, a destination one of their dispatches goes to, created longer ago than
    ``older_than``. Never their values."""
    if state is not None:  # both: the sagas in ``state`` if it is one of ``states``
        states = [state] if states is None else [s for s in states if s == state]
    rows = yield (
        "list_sagas",
        {
            "states": None if states is None else sorted(states),
            "plan_id": plan_id,
            "namespace": namespace,
            "execution_id": execution_id,
            "destination": destination,
            "limit": limit,
            "older_than_s": None if older_than is None else older_than.total_seconds(),
        },
    )
    return rows


def count_finished_sagas(window: timedelta) -> Operation[dict[str, int]]:
    """How many sagas finished in the last ``window``, by end state."""
    rows = yield ("count_finished_sagas", {"window_s": window.total_seconds()})
    return {row["state"]: int(row["n"]) for row in rows}

"""The read model of one saga: what `sagas show --json` and `Client.get` return."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

SagaView = dict[str, Any]

_ATTEMPT_FIELDS = (
    "attempt",
    "request_id",
    "outcome",
    "settled_by",
    "fencing_status",
    "grants",
    "sent_at",
    "completed_at",
    "status_code",
    "error",
    "evidence",
    "claimed_at",
    "lease_owner",
    "lease_expires_at",
    "late",
    "late_outcome",
    "late_status_code",
    "late_error",
    "late_at",
)
_DISPATCH_FIELDS = (
    "direction",
    "state",
    "attempt",
    "max_attempts",
    "idempotency_key",
    "destination",
    "verb",
    "contract_hash",
    "delivery",
    "method",
    "path",
    "args_hash",
    "fencing_resources",
    "grants",
    "next_attempt_at",
    "lease_owner",
    "lease_expires_at",
    "uncertain_attempt",
    "last_outcome",
    "last_error",
    "created_at",
    "updated_at",
)
_STEP_FIELDS = (
    "effect_id",
    "sequence",
    "verb",
    "contract_hash",
    "state",
    "args_hash",
    "result",
    "after",  # the steps it runs after (the plan's graph), see store.operations.load_saga
    "succeeded_order",
)
_SAGA_FIELDS = (
    "saga_id",
    "namespace",
    "execution_id",
    "plan_id",
    "plan_digest",
    "state",
    "stop_reason",
    "cancel_requested_at",
    "cancel_requested_by",
    "revision",
    "created_at",
    "updated_at",
    "finished_at",
    "facts",
)
_EVENT_FIELDS = (
    "event_id",
    "at",
    "kind",
    "effect_id",
    "direction",
    "attempt",
    "from_state",
    "to_state",
    "actor",
    "evidence",
    "detail",
)


def jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, Mapping):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    return value


def _pick(row: Mapping[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    return {field: jsonable(row.get(field)) for field in fields}


def build_saga_view(
    saga: Mapping[str, Any],
    steps: Sequence[Mapping[str, Any]],
    dispatches: Sequence[Mapping[str, Any]],
    attempts: Sequence[Mapping[str, Any]],
    events: Sequence[Mapping[str, Any]],
) -> SagaView:
    attempts_by_dispatch: dict[Any, list[dict[str, Any]]] = {}
    for attempt in attempts:
        attempts_by_dispatch.setdefault(attempt["dispatch_id"], []).append(
            _pick(attempt, _ATTEMPT_FIELDS)
        )
    dispatches_by_step: dict[str, list[dict[str, Any]]] = {}
    for dispatch in dispatches:
        view = _pick(dispatch, _DISPATCH_FIELDS)
        view["attempts"] = attempts_by_dispatch.get(dispatch["dispatch_id"], [])
        dispatches_by_step.setdefault(dispatch["effect_id"], []).append(view)
    view = _pick(saga, _SAGA_FIELDS)
    view["steps"] = []
    for step in steps:
        step_view = _pick(step, _STEP_FIELDS)
        step_view["has_compensation"] = step.get("compensation") is not None
        step_view["dispatches"] = dispatches_by_step.get(step["effect_id"], [])
        view["steps"].append(step_view)
    view["timeline"] = [_pick(event, _EVENT_FIELDS) for event in events]
    view["next_actions"] = next_actions(view)
    return view


_BLOCKING = {
    "blocked_unknown": ("blocked_unknown",),
    "blocked_fence": ("blocked_fence",),
    "blocked_contract": ("blocked_contract",),
    "blocked_compensation": ("failed_permanent", "blocked_unknown"),
}


def blocking_dispatches(view: SagaView) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The (step, dispatch) pairs that hold a blocked saga where it is."""
    states = _BLOCKING.get(view["state"], ())
    found = []
    for step in view["steps"]:
        for dispatch in step["dispatches"]:
            compensation_only = view["state"] == "blocked_compensation"
            if dispatch["state"] in states and (
                not compensation_only or dispatch["direction"] == "compensation"
            ):
                found.append((step, dispatch))
    return found


def next_actions(view: SagaView) -> list[str]:
    """The exact commands an operator can run next (empty when nothing is to be done)."""
    saga = view["saga_id"]
    state = view["state"]
    evidence = "--evidence 'WHAT YOU CHECKED'"
    if state == "blocked_unknown":
        actions = []
        for step, dispatch in blocking_dispatches(view):
            where = f"effectusd resolve {saga} {step['effect_id']}"
            if dispatch["direction"] == "compensation":
                where += " --direction compensation"
            actions += [
                f"{where} --committed [--result JSON] {evidence}",
                f"{where} --not-committed --retry {evidence}",
                f"{where} --not-committed --fail {evidence}",
            ]
        return actions
    if state == "blocked_contract":  # restore the pinned contract, or adopt the loaded one
        return [
            f"effectusd retry {saga} {evidence}",
            f"effectusd adopt-contract {saga} {evidence}",
        ]
    if state in ("blocked_fence", "blocked_compensation"):
        actions = [f"effectusd retry {saga} {evidence}"]
        for step, dispatch in blocking_dispatches(view):
            if state == "blocked_compensation" and dispatch["state"] == "failed_permanent":
                actions.append(  # it was undone by hand
                    f"effectusd resolve {saga} {step['effect_id']} --direction compensation "
                    "--committed --evidence 'HOW IT WAS UNDONE'"
                )
        return actions
    if state in ("running", "compensating") and not view.get("cancel_requested_at"):
        return [f"effectusd cancel {saga} {evidence}"] if state == "running" else []
    return []

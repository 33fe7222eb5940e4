"""The read model of sagas: what ``Client.get``/``wait``/``list`` return and what
``sagas show --json`` / ``sagas list --json`` print (``model_dump(mode="json")`` of the same
models, so there is one schema: docs/schema/).

Times print as ``datetime.isoformat()`` (``+00:00``, not pydantic's ``Z``): that is the form
the command line has always printed and scripts may compare against.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    JsonValue,
    PlainSerializer,
    TypeAdapter,
    WithJsonSchema,
)

from effectusd.core.budgets import answered_not_committed
from effectusd.core.operator_decisions import cancel_offered
from effectusd.core.states import (
    Delivery,
    Direction,
    DispatchState,
    FencingStatus,
    OutcomeClass,
    SagaState,
    SettledBy,
    StepState,
)
from effectusd.core.transition import NOT_SENT

__all__ = [
    "AttemptView",
    "DispatchView",
    "Grant",
    "SagaSummary",
    "SagaView",
    "StepView",
    "TimelineEvent",
    "blocking_dispatches",
    "build_saga_view",
    "jsonable",
    "next_actions",
    "summarize",
    "view_schemas",
]

Timestamp = Annotated[
    datetime,
    PlainSerializer(lambda value: value.isoformat(), return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]
# PostgreSQL returns uuid columns as UUID, SQLite as text: both are the same string here.
Text = Annotated[
    str, BeforeValidator(lambda value: str(value) if isinstance(value, UUID) else value)
]


class _View(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Grant(_View):
    """A fencing token taken for a resource before the call."""

    resource: str
    token: int


class AttemptView(_View):
    """One call of a dispatch (or its lease, while it is in progress)."""

    attempt: int
    request_id: Text
    outcome: OutcomeClass | None
    settled_by: SettledBy | None
    fencing_status: FencingStatus | None
    grants: list[Grant] | None
    # None: never written ahead. Set does not mean sent: see not_sent.
    sent_at: Timestamp | None
    # The call ended before its request was written (connection refused, a pre-send guard, a
    # fence wait, a lease run out unsent): nothing reached the destination, and it is no
    # request of X-Effectus-Attempt or of retry.max_attempts. Read from its evidence.
    not_sent: bool = False
    completed_at: Timestamp | None
    status_code: int | None
    error: str | None
    evidence: dict[str, JsonValue] | None
    claimed_at: Timestamp
    lease_owner: str
    lease_expires_at: Timestamp
    late: bool  # an answer came after the lease ran out: kept as evidence, not applied
    late_outcome: OutcomeClass | None
    late_status_code: int | None
    late_error: str | None
    late_at: Timestamp | None


class DispatchView(_View):
    """One direction (forward or compensation) of a step: the outbox row."""

    direction: Direction
    state: DispatchState
    attempt: int  # claims made (the settlement guard's counter)
    # requests that may have been written (claims that ended before their write aside): the
    # X-Effectus-Attempt of the latest, and what max_attempts bounds; the attempt a person sees
    requests: int
    max_attempts: int
    idempotency_key: str
    destination: str
    verb: str
    contract_hash: str
    delivery: Delivery
    method: str
    path: str
    args_hash: str
    # The arguments as sent: the stored canonical bytes the argument hash was taken of.
    args_canonical: str
    fencing_resources: list[str]
    grants: list[Grant] | None
    next_attempt_at: Timestamp
    lease_owner: str | None
    lease_expires_at: Timestamp | None
    uncertain_attempt: int | None  # an attempt that may have reached the destination
    last_outcome: OutcomeClass | None
    last_error: str | None
    created_at: Timestamp
    updated_at: Timestamp
    fence_waits: int  # claims that found a fencing resource busy (nothing sent)
    fence_wait_since: Timestamp | None  # the wait in progress began then (None: none)
    # when the time budget of calls never sent or known not committed started (the first
    # claim, or the claim after an operator's retry; retry.give_up_after runs from here)
    budget_started_at: Timestamp | None
    gives_up_at: Timestamp | None  # while it waits for its destination: when it gives up
    # what it waits for while retry_wait: its destination refusing, or a busy fencing
    # resource (``waiting_detail``); None otherwise
    waiting: str | None
    attempts: list[AttemptView]


class StepView(_View):
    effect_id: str
    sequence: int
    verb: str
    contract_hash: str
    state: StepState
    args_hash: str | None
    result: JsonValue
    after: list[str]  # the steps it runs after (the plan's graph), see store.operations.load_saga
    succeeded_order: int | None  # its place among the saga's successes
    has_compensation: bool
    dispatches: list[DispatchView]


class TimelineEvent(_View):
    """One entry of the saga's append-only timeline."""

    # A stored event's id (ascending along the timeline); negative for an entry read from an
    # attempt or outbox row instead (dispatch_claimed, attempt_settled, dispatch_enqueued),
    # unique and stable: effectusd.core.timeline.
    event_id: int
    at: Timestamp
    kind: str
    effect_id: str | None
    direction: Direction | None
    attempt: int | None
    from_state: str | None  # a saga, step or dispatch state, by ``kind``
    to_state: str | None
    actor: str
    evidence: str | None
    detail: dict[str, JsonValue]


class SagaView(_View):
    """One saga with its steps, their dispatches and attempts, its timeline, and the commands
    an operator can run next (empty unless it waits for one)."""

    saga_id: str
    namespace: str
    execution_id: str
    plan_id: str
    plan_digest: str
    state: SagaState
    stop_reason: str | None
    cancel_requested_at: Timestamp | None
    cancel_requested_by: str | None
    revision: int
    created_at: Timestamp
    updated_at: Timestamp
    finished_at: Timestamp | None
    facts: dict[str, JsonValue]
    steps: list[StepView]
    timeline: list[TimelineEvent]
    next_actions: list[str]

    def step(self, effect_id: str) -> StepView:
        """The step ``effect_id``; KeyError if the plan has none."""
        for each in self.steps:
            if each.effect_id == effect_id:
                return each
        raise KeyError(effect_id)


class SagaSummary(_View):
    """One line of ``list``: newest first."""

    saga_id: str
    execution_id: str
    plan_id: str
    state: SagaState
    stop_reason: str | None
    created_at: Timestamp
    updated_at: Timestamp


class StoredSagaSummary(SagaSummary):
    """One line of ``sagas list`` over several stores: the summary and the label of the store
    that holds the saga (``[database.stores.LABEL]``)."""

    store: str


def jsonable(value: Any) -> Any:
    """A store row's values as JSON values (times as ``isoformat()``, UUIDs as text), for rows
    that have no view of their own."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, Mapping):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    return value


def _pick(row: Mapping[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    return {name: row.get(name) for name in model.model_fields}


def build_saga_view(
    saga: Mapping[str, Any],
    steps: Sequence[Mapping[str, Any]],
    dispatches: Sequence[Mapping[str, Any]],
    attempts: Sequence[Mapping[str, Any]],
    events: Sequence[Mapping[str, Any]],
) -> SagaView:
    """The view of a saga's rows as the store reads them (either store)."""
    attempts_by_dispatch: dict[Any, list[dict[str, Any]]] = {}
    for attempt in attempts:
        row = _pick(attempt, AttemptView)
        row["not_sent"] = (attempt.get("evidence") or {}).get("sent") == NOT_SENT
        attempts_by_dispatch.setdefault(attempt["dispatch_id"], []).append(row)
    dispatches_by_step: dict[str, list[dict[str, Any]]] = {}
    for dispatch in dispatches:
        row = _pick(dispatch, DispatchView)
        row["attempts"] = attempts_by_dispatch.get(dispatch["dispatch_id"], [])
        row["waiting"] = waiting_detail(row)
        dispatches_by_step.setdefault(dispatch["effect_id"], []).append(row)
    step_rows = []
    for step in steps:
        row = _pick(step, StepView)
        row["has_compensation"] = step.get("compensation") is not None
        row["dispatches"] = dispatches_by_step.get(step["effect_id"], [])
        step_rows.append(row)
    view = _pick(saga, SagaView)
    view.update(
        steps=step_rows, timeline=[_pick(event, TimelineEvent) for event in events], next_actions=[]
    )
    typed = SagaView.model_validate(view)
    return typed.model_copy(update={"next_actions": next_actions(typed)})


def waiting_detail(dispatch: Mapping[str, Any]) -> str | None:
    """What a dispatch in retry_wait waits for, from its row and attempts: a busy fencing
    resource, or its destination while the latest calls were never sent or answered known
    not committed (an outage ridden out under retry.give_up_after, not a failure)."""
    if dispatch["state"] != DispatchState.RETRY_WAIT.value:
        return None
    next_try = _iso(dispatch["next_attempt_at"])
    if dispatch.get("fence_wait_since") is not None:
        since = _iso(dispatch["fence_wait_since"])
        return f"waiting for a fencing resource since {since}, next look at {next_try}"
    run: list[Mapping[str, Any]] = []
    for attempt in reversed(dispatch["attempts"]):
        if not answered_not_committed(attempt["settled_by"], attempt["outcome"]):
            break
        run.insert(0, attempt)
    if not run:
        return None
    how = "not sent" if run[-1]["not_sent"] else "refused, not committed"
    gives_up = dispatch.get("gives_up_at")
    until = "" if gives_up is None else f", gives up at {_iso(gives_up)}"
    return (
        f"waiting for destination {dispatch['destination']} since {_iso(run[0]['claimed_at'])} "
        f"({how}: {run[-1]['error'] or 'no detail'}), next try at {next_try}{until}"
    )


def _iso(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


def summarize(rows: Sequence[Mapping[str, Any]]) -> list[SagaSummary]:
    """``list_sagas`` rows as summaries."""
    return [SagaSummary.model_validate(_pick(row, SagaSummary)) for row in rows]


def view_schemas() -> dict[str, dict[str, Any]]:
    """The JSON Schema of what ``sagas show --json`` and ``sagas list --json`` print, by the
    file name docs/schema/ publishes it under."""
    summaries = TypeAdapter(list[SagaSummary | StoredSagaSummary]).json_schema(mode="serialization")
    return {
        "saga.json": SagaView.model_json_schema(mode="serialization"),
        "saga-list.json": {"title": "SagaList", **summaries},
    }


_BLOCKING: dict[SagaState, tuple[DispatchState, ...]] = {
    SagaState.BLOCKED_UNKNOWN: (DispatchState.BLOCKED_UNKNOWN,),
    SagaState.BLOCKED_FENCE: (DispatchState.BLOCKED_FENCE,),
    SagaState.BLOCKED_CONTRACT: (DispatchState.BLOCKED_CONTRACT,),
    SagaState.BLOCKED_DESTINATION: (DispatchState.BLOCKED_DESTINATION,),
    SagaState.BLOCKED_COMPENSATION: (DispatchState.FAILED_PERMANENT, DispatchState.BLOCKED_UNKNOWN),
}


def blocking_dispatches(view: SagaView) -> list[tuple[StepView, DispatchView]]:
    """The (step, dispatch) pairs that hold a blocked saga where it is."""
    states = _BLOCKING.get(view.state, ())
    compensation_only = view.state is SagaState.BLOCKED_COMPENSATION
    return [
        (step, dispatch)
        for step in view.steps
        for dispatch in step.dispatches
        if dispatch.state in states
        and (not compensation_only or dispatch.direction is Direction.COMPENSATION)
    ]


def next_actions(view: SagaView) -> list[str]:
    """The exact commands an operator can run next (empty when nothing is to be done)."""
    saga = view.saga_id
    state = view.state
    evidence = "--evidence 'WHAT YOU CHECKED'"
    if state is SagaState.BLOCKED_UNKNOWN:
        actions = []
        for step, dispatch in blocking_dispatches(view):
            where = f"effectusd resolve {saga} {step.effect_id}"
            if dispatch.direction is Direction.COMPENSATION:
                where += " --direction compensation"
            actions += [
                f"{where} --committed [--result JSON] {evidence}",
                f"{where} --not-committed --retry {evidence}",
                f"{where} --not-committed --fail {evidence}",
            ]
        return actions
    if state is SagaState.BLOCKED_CONTRACT:  # adopt the loaded contract, or restore the pinned
        return [
            f"effectusd adopt-contract {saga} {evidence}",
            f"effectusd retry {saga} {evidence}",
        ]
    if state in (SagaState.BLOCKED_FENCE, SagaState.BLOCKED_COMPENSATION):
        actions = [f"effectusd retry {saga} {evidence}"]
        for step, dispatch in blocking_dispatches(view):
            if (
                state is SagaState.BLOCKED_COMPENSATION
                and dispatch.state is DispatchState.FAILED_PERMANENT
            ):
                actions.append(  # it was undone by hand
                    f"effectusd resolve {saga} {step.effect_id} --direction compensation "
                    "--committed --evidence 'HOW IT WAS UNDONE'"
                )
        return actions
    if state is SagaState.BLOCKED_DESTINATION:  # fix the credential or route first
        actions = [f"effectusd retry {saga} {evidence}"]
    else:
        actions = []
    blocking = [dispatch.direction for _, dispatch in blocking_dispatches(view)]
    if cancel_offered(state, view.cancel_requested_at is not None, blocking):
        actions.append(f"effectusd cancel {saga} {evidence}")
    return actions

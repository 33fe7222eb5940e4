"""Locked rows in, engine facts out; an engine Transition out, the rows to write back.

Store-neutral: the recorder and the operator actions both read their facts and shape their
writes here, and each store executes the named statements in its own dialect.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from datetime import timedelta
from typing import Any

from effectusd.backends.operation import Operation
from effectusd.core.canonical import canonical_text
from effectusd.core.plan import CheckedPlan
from effectusd.core.pre_send import may_wait_for_slot
from effectusd.core.settlement import AttemptFacts, LockedDispatch
from effectusd.core.states import (
    Delivery,
    Direction,
    DispatchState,
    SagaState,
    SettledBy,
    StepState,
    by_value,
)
from effectusd.core.steps import STEP_STATE_OF
from effectusd.core.timeline import SETTLED, attempt_columns, derived_event_id, outbox_columns
from effectusd.core.transition import (
    Completion,
    DispatchFacts,
    Event,
    SagaFacts,
    StepFacts,
    Transition,
)

Row = Mapping[str, Any]
# Stored values to members, without an enum call per value (see ``by_value``).
DIRECTIONS = by_value(Direction)
DELIVERIES = by_value(Delivery)
DISPATCH_STATES = by_value(DispatchState)
STEP_STATES = by_value(StepState)
SAGA_STATES = by_value(SagaState)
SETTLED_BY = by_value(SettledBy)
# The one encoding of the row documents that are neither hashed nor sent (an attempt's
# evidence, a success's result, an event's detail): json.dumps(..., default=str), made once
# (json.dumps builds an encoder per call when given any option, a third of the time of
# encoding a small evidence document). RFC 8785 canonical text stays for what is hashed or
# matched by its text (arguments, plans, fencing resources: docs/design.md sections 2-3).
_DOCUMENTS = json.JSONEncoder(default=str)


class TransitionRows:
    """The statements of one batch of transitions, grouped by query name."""

    def __init__(self) -> None:
        self.attempts: list[dict[str, Any]] = []
        self.lates: list[dict[str, Any]] = []
        self.dispatches: list[dict[str, Any]] = []
        self.steps: list[dict[str, Any]] = []
        self.sagas: list[dict[str, Any]] = []
        self.inserts: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.released: list[tuple[int, str]] = []
        # (saga_id, forward dispatches of its parallel steps to cancel): each must be canceled
        self.cancels: list[tuple[str, list[str]]] = []
        self.woken: set[str] = set()  # destinations to wake besides those of new dispatches
        # the destinations of ``inserts``: insert_dispatch wakes each at commit
        self.queued: set[str] = set()
        self._step_at: dict[tuple[str, str], dict[str, Any]] = {}
        self._late_at: dict[tuple[int, int], dict[str, Any]] = {}
        self._settled_sagas: set[str] = set()  # whose settlement's entry its attempt row carries

    def late(self, completion: Completion) -> None:
        # One row per attempt (a store may write the batch as one set-based statement, which
        # applies one source row per target row): a later late answer replaces an earlier one,
        # as running them in order would.
        key = (completion.dispatch_id, completion.attempt)
        if key in self._late_at:
            self._late_at[key].update(outcome_params(completion))
        else:
            self._late_at[key] = outcome_params(completion)
            self.lates.append(self._late_at[key])

    def _step(self, update: dict[str, Any]) -> None:
        """One row per step in this batch (keep_step_state, an upsert, takes one row per
        step): a later move of a step replaces an earlier one, as running them would."""
        key = (update["saga_id"], update["effect_id"])
        row = self._step_at.get(key)
        if row is None:
            self._step_at[key] = update
            self.steps.append(update)
        else:
            row["state"] = update["state"]

    def apply(
        self,
        completion: Completion | None,
        row: Row,
        transition: Transition,
        *,
        attempt: bool = True,
        dispatch: bool = True,
    ) -> None:
        """Add ``transition`` of ``row``'s saga. ``attempt``: settle the attempt row with
        ``completion``; ``dispatch``: write the dispatch row (the operator actions leave the
        attempt, and sometimes the dispatch, as they are). ``completion`` is None only where
        neither is written: no attempt ended (an operator's cancel or retry)."""
        saga_id = row["saga_id"]
        settled = transition.settled
        if settled is not None:
            # One settlement per saga in a batch carries its entry: it goes before every event
            # of the batch's transaction (effectusd.core.timeline), and only on a row written.
            if not attempt or saga_id in self._settled_sagas:
                raise ValueError(f"saga {saga_id}: a settlement's entry with no row to carry it")
            self._settled_sagas.add(saga_id)
        if attempt:
            assert completion is not None
            params = outcome_params(completion)  # filled in place, not copied
            params["settled_by"] = completion.cause.settled_by.value
            fencing = completion.fencing_status
            params["fencing_status"] = fencing.value if fencing else None
            params["saga_id"] = saga_id
            attempt_columns(settled, params)
            self.attempts.append(params)
        if dispatch:
            assert completion is not None
            self._dispatch(completion, transition)
        if completion is not None and row["lease_token"] is not None and row.get("fenced", True):
            # only a dispatch with fencing resources can hold fencing leases
            self.released.append((completion.dispatch_id, str(row["lease_token"])))
        self._saga(saga_id, completion, transition)

    def _dispatch(self, completion: Completion, transition: Transition) -> None:
        # A forward success's result and order go on its dispatch's row (migration 10016).
        success = transition.success
        self.dispatches.append(
            {
                "dispatch_id": completion.dispatch_id,
                "state": transition.dispatch_state.value,
                "retry_delay_s": (
                    None
                    if transition.retry_delay is None
                    else transition.retry_delay.total_seconds()
                ),
                "uncertain_attempt": transition.uncertain_attempt,
                "last_outcome": transition.last_outcome.value if transition.last_outcome else None,
                "last_error": transition.last_error,
                "result": None if success is None else _DOCUMENTS.encode(success.result),
                "succeeded_order": None if success is None else success.order,
                # a claim that ended before its write is no request (migration 10024)
                "unsent": 0 if completion.written else 1,
                "gives_up_in_s": (
                    None
                    if transition.gives_up_in is None
                    else transition.gives_up_in.total_seconds()
                ),
            }
        )

    def _saga(self, saga_id: str, completion: Completion | None, transition: Transition) -> None:
        for step in transition.steps:  # the kept states: the rest is read from dispatch rows
            self._step({"saga_id": saga_id, "effect_id": step.effect_id, "state": step.state.value})
        if transition.cancel_dispatches:
            self.cancels.append((saga_id, list(transition.cancel_dispatches)))
        if transition.saga is not None:
            self.sagas.append(
                {
                    "saga_id": saga_id,
                    "state": transition.saga.state.value,
                    "stop_reason": transition.saga.stop_reason,
                }
            )
        # the settlement entry a carried start goes after (none where no attempt ended)
        follows = (
            None
            if completion is None
            else derived_event_id(completion.dispatch_id, completion.attempt, SETTLED)
        )
        for spec in transition.new_dispatches:
            params = dict(vars(spec))  # flat fields: asdict's deep copy cost the recorder 2%
            fencing = spec.fencing_resources
            params["fencing_resources"] = canonical_text(fencing) if fencing else "[]"
            params["not_before"] = None
            outbox_columns(transition, follows, params)
            self.inserts.append(params)
            self.queued.add(spec.destination)
        for event in transition.events:
            self.events.append(event_params(saga_id, event))

    def claim_new(self, take_slot: Callable[[str, bool], bool]) -> list[dict[str, Any]]:
        """Move the new dispatches this daemon has a slot for (``take_slot`` takes one for a
        destination, or a place waiting for one where its second argument allows it, or says
        there is none) out of ``inserts``: they are written claimed
        (``insert_dispatch_claimed``). Every new dispatch is due now, and was built from the
        live registry, so its call timeout and retry budget are the ones a claim would
        apply."""
        claimed: list[dict[str, Any]] = []
        kept: list[dict[str, Any]] = []
        self.queued = set()
        for params in self.inserts:
            destination = params["destination"]
            may_wait = may_wait_for_slot(
                DELIVERIES[params["delivery"]], params["fencing_resources"] != "[]"
            )
            if take_slot(destination, may_wait):
                claimed.append(params)
            else:
                kept.append(params)
                self.queued.add(destination)
        self.inserts = kept
        return claimed

    @property
    def destinations(self) -> set[str]:
        """Destinations that get a new queued dispatch (``queued``), and the ``woken``: each is
        woken once at commit."""
        return self.queued | self.woken


def outcome_params(completion: Completion) -> dict[str, Any]:
    return {
        "dispatch_id": completion.dispatch_id,
        "attempt": completion.attempt,
        "outcome": completion.outcome.value,
        "status_code": completion.status_code,
        "error": completion.error,
        "evidence": _DOCUMENTS.encode(dict(completion.evidence)),
    }


def event_params(saga_id: str, event: Event) -> dict[str, Any]:
    """The insert_event row of ``event``, whoever appends it (the recorder, the submit, an
    operator action): its detail in the one encoding of row documents."""
    return {
        "saga_id": saga_id,
        "effect_id": event.effect_id,
        "direction": event.direction,
        "attempt": event.attempt,
        "kind": event.kind,
        "from_state": event.from_state,
        "to_state": event.to_state,
        "actor": event.actor,
        "evidence": event.evidence,
        "detail": _DOCUMENTS.encode(dict(event.detail)),
    }


def dispatch_facts(row: Row) -> DispatchFacts:
    elapsed = row["budget_elapsed_s"]
    return DispatchFacts(
        dispatch_id=row["dispatch_id"],
        effect_id=row["effect_id"],
        direction=DIRECTIONS[row["direction"]],
        delivery=DELIVERIES[row["delivery"]],
        verb=row["verb"],
        state=DISPATCH_STATES[row["state"]],
        attempt=row["attempt"],
        max_attempts=row["max_attempts"],
        uncertain_attempt=row["uncertain_attempt"],
        fence_waits=row["fence_waits"],
        budget_base=row["budget_base"],
        unsent=row["unsent"],
        budget_elapsed=None if elapsed is None else timedelta(seconds=elapsed),
    )


def locked_dispatch(row: Row) -> LockedDispatch:
    """A lock_dispatches row as the settlement guard sees it."""
    token = row["lease_token"]
    return LockedDispatch(
        dispatch_facts(row), None if token is None else str(token), bool(row["lease_expired"])
    )


def attempt_facts(row: Row) -> AttemptFacts:
    """A select_completion_attempts row."""
    settled_by = row["settled_by"]
    token = row.get("lease_token")
    return AttemptFacts(
        None if settled_by is None else SETTLED_BY[settled_by],
        bool(row["later_sent"]),
        sent=bool(row["sent"]),
        lease_token=None if token is None else str(token),
    )


def steps_by_saga(rows: Iterable[Row]) -> dict[str, list[Row]]:
    """select_steps_of_sagas rows (a saga's dispatch rows and kept step rows), by saga."""
    by_saga: dict[str, list[Row]] = {}
    for row in rows:
        by_saga.setdefault(row["saga_id"], []).append(row)
    return by_saga


def plan_steps(plan: CheckedPlan, rows: Iterable[Row]) -> dict[str, StepFacts]:
    """A saga's steps as its pinned plan lists them, by effect id, from its
    select_steps_of_sagas rows: each step's state derived from its forward and compensation
    dispatches' (``effectusd.core.steps.STEP_STATE_OF``, ``step_state``'s table) and, where
    it has none, from its kept step row (a step that failed at enqueue; pending without one);
    the result and order of its success, and whether an attempt of it may have committed, its
    forward dispatch's."""
    forward: dict[str, Row] = {}
    compensation: dict[str, str] = {}
    kept: dict[str, str] = {}
    for row in rows:
        direction = row["direction"]
        if direction == "forward":
            forward[row["effect_id"]] = row
        elif direction == "compensation":
            compensation[row["effect_id"]] = row["state"]
        else:  # a step row
            kept[row["effect_id"]] = row["state"]
    steps: dict[str, StepFacts] = {}
    for step in plan.steps:
        ahead = forward.get(step.id)
        undo = compensation.get(step.id)
        own = kept.get(step.id)
        if ahead is None and undo is None and own is None:
            steps[step.id] = StepFacts(step.id, step.sequence, StepState.PENDING)  # not begun
            continue
        dispatch = None if ahead is None else DISPATCH_STATES[ahead["state"]]
        state = STEP_STATE_OF.get((dispatch, None if undo is None else DISPATCH_STATES[undo]))
        if state is None:  # no dispatch: the step row's kept state
            state = StepState.PENDING if own is None else STEP_STATES[own]
        steps[step.id] = StepFacts(
            step.id,
            step.sequence,
            state,
            None if ahead is None else ahead["result"],
            dispatch=dispatch,
            uncertain=ahead is not None and bool(ahead["uncertain"]),
            succeeded_order=None if ahead is None else ahead["succeeded_order"],
        )
    return steps


def saga_facts(
    row: Row,
    step_rows: Iterable[Row],
    plans: MutableMapping[str, CheckedPlan] | None = None,
) -> SagaFacts:
    """A locked saga row (lock_sagas.sql) and its select_steps_of_sagas rows as the engine's
    facts; ``plans`` caches checked plans by digest."""
    plan = checked_plan(row, plans)
    return SagaFacts(
        saga_id=row["saga_id"],
        namespace=row["namespace"],
        execution_id=row["execution_id"],
        state=SAGA_STATES[row["state"]],
        cancel_requested=bool(row["cancel_requested"]),
        plan=plan,
        facts=row["facts"],
        steps=plan_steps(plan, step_rows),
        compensation_reason=row["compensation_reason"],
    )


def checked_plan(row: Row, plans: MutableMapping[str, CheckedPlan] | None = None) -> CheckedPlan:
    """A saga row's checked plan, from ``plans`` (by digest) or parsed from the row's
    ``plan`` (lock_sagas sends none for a digest the caller already has) and kept there."""
    plan = None if plans is None else plans.get(row["plan_digest"])
    if plan is None:
        plan = CheckedPlan.model_validate(row["plan"])
        if plans is not None:
            plans[row["plan_digest"]] = plan
    return plan


def may_cancel_siblings(row: Row, plans: MutableMapping[str, CheckedPlan]) -> bool:
    """Whether a settlement of this saga may cancel a sibling forward dispatch: only a plan
    with parallel steps does (``effectusd.core.next_step``); a plan that cannot be read is
    assumed to (its settlement fails where it is read, as before)."""
    try:
        return not checked_plan(row, plans).is_sequential
    except Exception:  # noqa: BLE001 - decided where the facts are built, for that saga alone
        return True


class StaleSiblings(RuntimeError):
    """A sibling the engine decided to cancel was no longer cancelable when written: the
    facts it decided from did not hold (they are read under lock, so this is a bug, and the
    recorder quarantines the completion rather than write a decision made on wrong facts)."""


def write_rows(rows: TransitionRows) -> Operation[None]:
    """The statements of ``rows`` (each run once per parameter row), in the order they must
    run; fencing releases and notifications are the caller's."""
    for name, params in (
        ("settle_attempt", rows.attempts),
        ("record_late_completion", rows.lates),
        ("update_dispatch_settled", rows.dispatches),
        ("keep_step_state", rows.steps),
        ("update_saga_state", rows.sagas),
        ("insert_dispatch", rows.inserts),
        ("insert_event", rows.events),
    ):
        if params:
            yield name, params
        if name == "update_dispatch_settled" and rows.cancels:
            yield from cancel_siblings(rows.cancels)


def cancel_siblings(cancels: list[tuple[str, list[str]]]) -> Operation[None]:
    """Cancel each saga's named forward dispatches, every one of them or raise."""
    for saga_id, effect_ids in cancels:
        done = yield ("cancel_forward_dispatches", {"saga_id": saga_id, "effect_ids": effect_ids})
        if len(done) != len(effect_ids):
            raise StaleSiblings(
                f"saga {saga_id}: {len(done)} of the {len(effect_ids)} forward dispatches to "
                f"cancel ({', '.join(effect_ids)}) were still unsent"
            )


def notify_rows(rows: TransitionRows) -> Operation[None]:
    """Wake the ``woken`` destinations that got no new queued dispatch: insert_dispatch wakes
    those that did, in its own statement."""
    for destination in sorted(rows.woken - rows.queued):
        yield ("notify_outbox", {"destination": destination})

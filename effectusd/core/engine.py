"""The saga engine: one outcome in, one complete transition out (docs/design.md section 6).

Everything here is a pure function of facts the store read under lock. The store applies the
returned Transition in the same transaction, guarded by state, attempt and lease token.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from effectusd.core.backoff import backoff_delay
from effectusd.core.canonical import JsonValue
from effectusd.core.contracts import RetryPolicy
from effectusd.core.enqueue import DispatchSpec, SagaRef, build_dispatch
from effectusd.core.expressions import ResolutionError
from effectusd.core.plan import CheckedPlan, CheckedStep
from effectusd.core.registry import Registry, retry_budget
from effectusd.core.states import (
    Delivery,
    Direction,
    DispatchState,
    FencingStatus,
    OutcomeClass,
    SagaState,
    StepState,
)

ENGINE = "engine"
FENCE_WAIT_MAX_DELAY = timedelta(seconds=5)


@dataclass(frozen=True)
class StepFacts:
    effect_id: str
    sequence: int
    state: StepState
    result: JsonValue = None


@dataclass(frozen=True)
class SagaFacts:
    saga_id: str
    namespace: str
    execution_id: str
    state: SagaState
    cancel_requested: bool
    plan: CheckedPlan
    facts: Mapping[str, JsonValue]
    steps: Mapping[str, StepFacts]

    @property
    def ref(self) -> SagaRef:
        return SagaRef(self.saga_id, self.namespace, self.execution_id)


@dataclass(frozen=True)
class DispatchFacts:
    dispatch_id: int
    effect_id: str
    direction: Direction
    delivery: Delivery
    verb: str
    state: DispatchState
    attempt: int
    max_attempts: int  # as stored; the budget in force is registry.retry_budget()
    uncertain_attempt: int | None
    # Attempts whose write-ahead found a fencing resource held by another live dispatch:
    # nothing was sent, so they are not attempts of the retry budget.
    fence_waits: int = 0
    budget_base: int | None = 0


@dataclass(frozen=True)
class FenceWait:
    """The write-ahead found a fencing resource held by another live dispatch; nothing was
    sent. ``waited`` runs from the first busy write-ahead of this wait (database clock);
    ``holder`` names the holding dispatch, its saga and lease owner, never a resource value."""

    waited: timedelta
    holder: str


@dataclass(frozen=True)
class Completion:
    """What one attempt ended with, as reported by the executor, a reclaim, a guard or a person."""

    dispatch_id: int
    attempt: int
    lease_token: str | None
    outcome: OutcomeClass
    settled_by: str = "executor"  # executor | reclaim | guard | operator
    status_code: int | None = None
    result: JsonValue = None
    error: str | None = None
    evidence: Mapping[str, Any] = field(default_factory=dict)
    fencing_status: FencingStatus | None = None
    actor: str = ENGINE
    operator_evidence: str | None = None
    contract_drift: bool = False  # set by the pre-dispatch guard; nothing was sent
    fence_wait: FenceWait | None = None  # set by the write-ahead; nothing was sent


@dataclass(frozen=True)
class Event:
    kind: str
    effect_id: str | None = None
    direction: str | None = None
    attempt: int | None = None
    from_state: str | None = None
    to_state: str | None = None
    actor: str = ENGINE
    evidence: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StepUpdate:
    effect_id: str
    state: StepState
    result: JsonValue = None
    set_result: bool = False
    args: str | None = None  # canonical resolved args, set when a forward step starts
    args_hash: str | None = None


@dataclass(frozen=True)
class SagaUpdate:
    state: SagaState
    stop_reason: str | None


@dataclass
class Transition:
    dispatch_state: DispatchState
    retry_delay: timedelta | None = None
    uncertain_attempt: int | None = None
    last_outcome: OutcomeClass | None = None
    last_error: str | None = None
    steps: list[StepUpdate] = field(default_factory=list)
    saga: SagaUpdate | None = None
    new_dispatches: list[DispatchSpec] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)


def settle(
    completion: Completion,
    dispatch: DispatchFacts,
    saga: SagaFacts,
    registry: Registry,
    jitter: float,
) -> Transition:
    """Decide everything that follows from ``completion`` (its guard already held)."""
    outcome = completion.outcome
    step = saga.plan.step(dispatch.effect_id)
    forward = dispatch.direction is Direction.FORWARD
    contract = registry.verbs.get(dispatch.verb)
    budget = retry_budget(dispatch.max_attempts, dispatch.budget_base, contract)
    budget_left = dispatch.attempt - dispatch.fence_waits < budget
    uncertain = dispatch.uncertain_attempt
    retry_policy = contract.retry if contract is not None else None
    builder = _Builder(saga, dispatch, completion, registry)

    if completion.contract_drift:
        builder.block(
            DispatchState.BLOCKED_CONTRACT,
            SagaState.BLOCKED_CONTRACT,
            f"verb {dispatch.verb!r} changed since the plan was checked; nothing was sent",
        )
    elif completion.fence_wait is not None:
        # Waiting for a busy resource is not an attempt of the retry budget; it has its own bound.
        wait = completion.fence_wait
        if wait.waited >= registry.fence_wait_limit or retry_policy is None:
            builder.block(
                DispatchState.BLOCKED_FENCE,
                SagaState.BLOCKED_FENCE,
                f"waited {wait.waited.total_seconds():.0f}s (fencing.wait_limit "
                f"{registry.fence_wait_limit.total_seconds():.0f}s) for a fencing resource "
                f"held by {wait.holder}; nothing was sent",
            )
        else:
            builder.retry(fence_wait_delay(retry_policy, dispatch.fence_waits, jitter))
    elif outcome is OutcomeClass.SUCCESS:
        builder.dispatch(DispatchState.SUCCEEDED)
        if forward:
            builder.step(StepState.SUCCEEDED, result=completion.result)
            builder.advance_forward(step)
        else:
            builder.step(StepState.COMPENSATED)
            builder.continue_compensation(step)
    elif outcome is OutcomeClass.UNKNOWN:
        uncertain = dispatch.attempt if uncertain is None else min(uncertain, dispatch.attempt)
        builder.transition.uncertain_attempt = uncertain
        if dispatch.delivery is Delivery.AT_LEAST_ONCE and budget_left and retry_policy:
            builder.retry(backoff_delay(retry_policy, dispatch.attempt, jitter))
        else:
            why = (
                "at_most_once: a call that may have reached the destination is never re-sent"
                if dispatch.delivery is Delivery.AT_MOST_ONCE
                else "retry budget exhausted with the outcome still unknown"
            )
            builder.block(DispatchState.BLOCKED_UNKNOWN, SagaState.BLOCKED_UNKNOWN, why)
    elif outcome is OutcomeClass.STALE_FENCE:
        builder.block(
            DispatchState.BLOCKED_FENCE,
            SagaState.BLOCKED_FENCE,
            "the destination rejected the fencing token as stale",
        )
    elif (
        uncertain is not None
        and not (outcome is OutcomeClass.PERMANENT and dispatch.delivery is Delivery.AT_LEAST_ONCE)
        and (outcome is OutcomeClass.PERMANENT or not budget_left)
    ):
        # A later answer must not mask an earlier attempt that may have committed. An
        # at_least_once destination dedupes and replays by key, so its definite "no" is the
        # answer for the key, earlier attempts included; attempts that were not sent are not.
        builder.block(
            DispatchState.BLOCKED_UNKNOWN,
            SagaState.BLOCKED_UNKNOWN,
            f"attempt {uncertain} may have committed; a later {outcome.value} cannot settle it",
        )
    elif outcome is OutcomeClass.RETRYABLE and budget_left and retry_policy:
        builder.retry(backoff_delay(retry_policy, dispatch.attempt, jitter))
    else:
        # permanent failure, or known-not-committed with the budget spent
        why = (
            f"permanent failure: {completion.error or 'no detail'}"
            if outcome is OutcomeClass.PERMANENT
            else f"retry budget of {budget} attempt(s) exhausted"
        )
        builder.dispatch(DispatchState.FAILED_PERMANENT)
        if forward:
            builder.step(StepState.FAILED)
            builder.start_compensation(f"step {step.id!r} failed: {why}", failed=True)
        else:
            builder.saga(
                SagaState.BLOCKED_COMPENSATION,
                f"compensation of {step.id!r} failed: {why}",
            )
    if saga.state.is_blocked and builder.transition.saga is None:
        # A blocked saga whose blocking dispatch was settled (late answer, operator) resumes.
        builder.saga(SagaState.RUNNING if forward else SagaState.COMPENSATING, None)
    return builder.transition


def fence_wait_delay(policy: RetryPolicy, waits: int, jitter: float) -> timedelta:
    """When to look at a busy resource again: the verb's backoff, but never longer than
    FENCE_WAIT_MAX_DELAY, because a release does not wake the waiters (they poll)."""
    return min(backoff_delay(policy, waits, jitter), FENCE_WAIT_MAX_DELAY)


def late_completion_settles(
    completion: Completion, dispatch: DispatchFacts, later_sent: bool
) -> bool:
    """An answer for the attempt whose uncertainty blocked the dispatch settles it, if no
    later attempt was sent and the answer is known."""
    return (
        dispatch.state is DispatchState.BLOCKED_UNKNOWN
        and dispatch.uncertain_attempt == completion.attempt
        and not later_sent
        and completion.outcome is not OutcomeClass.UNKNOWN
    )


def as_settled_late(dispatch: DispatchFacts, completion: Completion) -> DispatchFacts:
    """The dispatch as settle() should see it when a late answer resolves its uncertainty."""
    return replace(dispatch, attempt=completion.attempt, uncertain_attempt=None)


def cancel_now(
    saga: SagaFacts, dispatch: DispatchFacts, registry: Registry, reason: str, actor: str
) -> Transition:
    """Operator cancel of a forward ``dispatch`` that cannot have taken effect (queued, or
    retry_wait with no uncertain attempt): its step goes back to pending and compensation
    starts over the succeeded steps (saga compensated with ``reason`` when none). No attempt
    completed, so there is no outcome; the store marks the dispatch canceled itself."""
    builder = _operator_builder(saga, dispatch, registry, actor)
    builder.transition.dispatch_state = DispatchState.CANCELED
    builder.step(StepState.PENDING, effect_id=dispatch.effect_id)
    builder.start_compensation(reason, failed=False)
    return builder.transition


def resume_enqueue(saga: SagaFacts, registry: Registry, actor: str) -> Transition:
    """Build the dispatch a saga blocked before creating (contract drift or unresolvable
    compensation arguments at enqueue time), as settle() would have: the compensation of the
    highest succeeded step with an inverse when the saga was compensating (a step failed or
    was compensated, or a cancel was requested), else the step after the last succeeded one.
    Only ``steps``, ``saga``, ``new_dispatches`` and ``events`` of the result are meaningful."""
    placeholder = DispatchFacts(
        0, "", Direction.FORWARD, Delivery.AT_MOST_ONCE, "", DispatchState.QUEUED, 0, 1, None
    )
    builder = _operator_builder(saga, placeholder, registry, actor)
    states = [s.state for s in saga.steps.values()]
    undoing = (StepState.FAILED, StepState.COMPENSATING, StepState.COMPENSATED)
    if saga.cancel_requested or any(state in undoing for state in states):
        candidates = builder._to_compensate(below=None)
        if candidates:
            builder._enqueue_compensation(candidates[0])
        resumed = SagaState.COMPENSATING if candidates else SagaState.COMPENSATED
    else:
        done = [s for s in saga.plan.steps if builder.step_states.get(s.id) is StepState.SUCCEEDED]
        builder.advance_forward(max(done, key=lambda s: s.sequence))  # step 1 is never missing
        resumed = SagaState.RUNNING
    if builder.transition.saga is None:
        builder.saga(resumed, None)
    return builder.transition


def _operator_builder(
    saga: SagaFacts, dispatch: DispatchFacts, registry: Registry, actor: str
) -> _Builder:
    completion = Completion(
        dispatch.dispatch_id, dispatch.attempt, None, OutcomeClass.SUCCESS, "operator", actor=actor
    )
    builder = _Builder(saga, dispatch, completion, registry)
    builder.transition.last_outcome = None  # no attempt completed
    return builder


class _Builder:
    def __init__(
        self, saga: SagaFacts, dispatch: DispatchFacts, completion: Completion, registry: Registry
    ) -> None:
        self.saga_facts = saga
        self.dispatch_facts = dispatch
        self.completion = completion
        self.registry = registry
        self.transition = Transition(
            dispatch_state=dispatch.state,
            uncertain_attempt=dispatch.uncertain_attempt,
            last_outcome=completion.outcome,
            last_error=completion.error,
        )
        self.results: dict[str, JsonValue] = {
            s.effect_id: s.result for s in saga.steps.values() if s.result is not None
        }
        self.step_states = {s.effect_id: s.state for s in saga.steps.values()}
        self.saga_state = saga.state
        self.actor = completion.actor

    # -- the dispatch that completed --------------------------------------------------------
    def dispatch(self, state: DispatchState) -> None:
        self.transition.dispatch_state = state
        self.transition.events.append(
            Event(
                "attempt_settled",
                self.dispatch_facts.effect_id,
                self.dispatch_facts.direction.value,
                self.completion.attempt,
                self.dispatch_facts.state.value,
                state.value,
                self.actor,
                self.completion.operator_evidence,
                {
                    "outcome": self.completion.outcome.value,
                    "settled_by": self.completion.settled_by,
                    "status_code": self.completion.status_code,
                    "error": self.completion.error,
                },
            )
        )

    def retry(self, delay: timedelta) -> None:
        self.dispatch(DispatchState.RETRY_WAIT)
        self.transition.retry_delay = delay

    def block(self, dispatch_state: DispatchState, saga_state: SagaState, reason: str) -> None:
        self.dispatch(dispatch_state)
        self.saga(
            saga_state,
            f"{self.dispatch_facts.effect_id} ({self.dispatch_facts.direction.value}): {reason}",
        )

    # -- steps and saga ---------------------------------------------------------------------
    def step(
        self, state: StepState, result: JsonValue = None, effect_id: str | None = None
    ) -> None:
        effect = effect_id or self.dispatch_facts.effect_id
        set_result = state is StepState.SUCCEEDED
        self.transition.steps.append(StepUpdate(effect, state, result, set_result))
        self._record_step(effect, state, result)

    def _record_step(self, effect: str, state: StepState, result: JsonValue = None) -> None:
        previous = self.step_states.get(effect)
        self.transition.events.append(
            Event(
                "step_state",
                effect,
                from_state=previous.value if previous else None,
                to_state=state.value,
                actor=self.actor,
            )
        )
        self.step_states[effect] = state
        if state is StepState.SUCCEEDED:
            self.results[effect] = result

    def saga(self, state: SagaState, reason: str | None) -> None:
        if state is self.saga_state and self.transition.saga is not None:
            return
        self.transition.events.append(
            Event(
                "saga_state",
                None,
                None,
                None,
                self.saga_state.value,
                state.value,
                self.actor,
                None,
                {"reason": reason} if reason else {},
            )
        )
        self.saga_state = state
        self.transition.saga = SagaUpdate(state, reason)

    # -- what comes next --------------------------------------------------------------------
    def advance_forward(self, after: CheckedStep) -> None:
        if self.saga_facts.cancel_requested:
            self.start_compensation("canceled on request", failed=False)
            return
        following = [s for s in self.saga_facts.plan.steps if s.sequence == after.sequence + 1]
        if not following:
            self.saga(SagaState.COMPLETED, None)
            return
        nxt = following[0]
        spec = self.enqueue(nxt, Direction.FORWARD)
        if spec is None:
            return
        if isinstance(spec, ResolutionError):
            self.step(StepState.FAILED, effect_id=nxt.id)
            self.start_compensation(f"step {nxt.id!r} could not be dispatched: {spec}", failed=True)

    def start_compensation(self, reason: str, failed: bool) -> None:
        candidates = self._to_compensate(below=None)
        if not candidates:
            if failed:
                self.saga(SagaState.FAILED, reason)
            else:
                self.saga(SagaState.COMPENSATED, reason)
            return
        self.saga(SagaState.COMPENSATING, reason)
        self._enqueue_compensation(candidates[0])

    def continue_compensation(self, after: CheckedStep) -> None:
        candidates = self._to_compensate(below=after.sequence)
        if not candidates:
            self.saga(SagaState.COMPENSATED, None)  # keeps the reason compensation began
            return
        self._enqueue_compensation(candidates[0])

    def _to_compensate(self, below: int | None) -> list[CheckedStep]:
        """Succeeded steps with an inverse, highest sequence first."""
        return sorted(
            (
                s
                for s in self.saga_facts.plan.steps
                if s.compensate is not None
                and self.step_states.get(s.id) is StepState.SUCCEEDED
                and (below is None or s.sequence < below)
            ),
            key=lambda s: s.sequence,
            reverse=True,
        )

    def _enqueue_compensation(self, step: CheckedStep) -> None:
        spec = self.enqueue(step, Direction.COMPENSATION)
        if isinstance(spec, ResolutionError):
            self.saga(
                SagaState.BLOCKED_COMPENSATION,
                f"compensation of {step.id!r} could not be dispatched: {spec}",
            )

    def enqueue(
        self, step: CheckedStep, direction: Direction
    ) -> DispatchSpec | ResolutionError | None:
        """Add the dispatch for ``step``; None when the saga blocked on contract drift."""
        if direction is Direction.FORWARD:
            verb, pinned = step.verb, step.contract_hash
        elif step.compensate is not None:
            verb, pinned = step.compensate.verb, step.compensate.contract_hash
        else:
            return ResolutionError(f"step {step.id!r} has no compensation")
        live = self.registry.verbs.get(verb)
        if live is None or not live.pins(pinned):
            why = "is not configured" if live is None else "changed since the plan was checked"
            self.saga(
                SagaState.BLOCKED_CONTRACT,
                f"{step.id} ({direction.value}): verb {verb!r} {why}",
            )
            return None
        try:
            spec = build_dispatch(
                self.saga_facts.ref,
                step,
                direction,
                self.registry,
                self.saga_facts.facts,
                self.results,
            )
        except ResolutionError as exc:
            return exc
        self.transition.new_dispatches.append(spec)
        if direction is Direction.FORWARD:
            self.transition.steps.append(
                StepUpdate(
                    step.id,
                    StepState.IN_PROGRESS,
                    args=spec.args_canonical,
                    args_hash=spec.args_hash,
                )
            )
            self._record_step(step.id, StepState.IN_PROGRESS)
        else:
            self.transition.steps.append(StepUpdate(step.id, StepState.COMPENSATING))
            self._record_step(step.id, StepState.COMPENSATING)
        self.transition.events.append(
            Event(
                "dispatch_enqueued",
                step.id,
                direction.value,
                None,
                None,
                DispatchState.QUEUED.value,
                self.actor,
                None,
                {"idempotency_key": spec.idempotency_key, "args_hash": spec.args_hash},
            )
        )
        return spec

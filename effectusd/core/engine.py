"""The saga engine: one outcome in, one complete transition out (docs/design.md section 6).

Everything here is a pure function of facts the store read under lock. The store applies the
returned Transition in the same transaction, guarded by state, attempt and lease token (the
guard and the late-answer rules are ``effectusd.core.settlement``'s).
"""

from __future__ import annotations

from datetime import timedelta

from effectusd.core.answers import PresetClass
from effectusd.core.backoff import backoff_delay, retry_delay
from effectusd.core.budgets import not_committed_budget_spent
from effectusd.core.contracts import RetryPolicy, VerbContract
from effectusd.core.durations import format_duration
from effectusd.core.frozen import frozen
from effectusd.core.next_step import TransitionBuilder
from effectusd.core.registry import Registry, retry_budget
from effectusd.core.states import (
    Cause,
    Delivery,
    Direction,
    DispatchState,
    OutcomeClass,
    SagaState,
    StepState,
)
from effectusd.core.transition import (
    ENGINE,
    Completion,
    DispatchFacts,
    Event,
    FenceWait,
    Quarantined,
    SagaFacts,
    SagaUpdate,
    StepFacts,
    StepUpdate,
    Transition,
)

__all__ = [
    "ENGINE",
    "FENCE_WAIT_MAX_DELAY",
    "Completion",
    "DispatchFacts",
    "Event",
    "FenceWait",
    "SagaFacts",
    "SagaUpdate",
    "StepFacts",
    "StepUpdate",
    "Transition",
    "cancel_now",
    "fence_wait_delay",
    "resume_enqueue",
    "resumed_stop_reason",
    "settle",
]

FENCE_WAIT_MAX_DELAY = timedelta(seconds=5)
# Timeline events of a wait for a busy fencing resource (docs/design.md section 8).
FENCE_WAIT_STARTED = "fence_wait_started"
FENCE_WAIT_ENDED = "fence_wait_ended"


def settle(
    completion: Completion,
    dispatch: DispatchFacts,
    saga: SagaFacts,
    registry: Registry,
    jitter: float,
) -> Transition:
    """Decide everything that follows from ``completion`` (its guard already held): one case
    per cause, then (an answer, a reclaim, a guard that only delays) per outcome."""
    builder = TransitionBuilder(saga, dispatch, completion, registry, completion.actor)
    match completion.cause, completion.outcome:
        case Cause.CONTRACT_DRIFT, _:
            builder.block(
                DispatchState.BLOCKED_CONTRACT,
                SagaState.BLOCKED_CONTRACT,
                f"verb {dispatch.verb!r} changed since the plan was checked; nothing was sent",
            )
        case FenceWait() as wait, _:
            _settle_fence_wait(builder, wait, dispatch, registry, jitter)
        case Quarantined(), _:
            raise ValueError("a quarantined completion is settled by core.poison.quarantine")
        case _, OutcomeClass.SUCCESS if dispatch.direction is Direction.FORWARD:
            builder.dispatch(DispatchState.SUCCEEDED)
            builder.step(StepState.SUCCEEDED, result=completion.result)
            if saga.cancel_requested:
                builder.start_compensation("canceled on request")
            else:
                builder.reconcile()
        case _, OutcomeClass.SUCCESS:
            builder.dispatch(DispatchState.SUCCEEDED)
            builder.step(StepState.COMPENSATED)
            builder.reconcile()
        case _:
            # answered, budget spent, lease too short, write-ahead failed, reclaimed,
            # resolved or probed as not committed: the outcome and the budgets decide
            _settle_failure(builder, completion, dispatch, registry, jitter)
    if saga.state.is_blocked:
        builder.resume_if_unblocked()
    return _restore_reason(saga, builder.transition)


def _settle_fence_wait(
    builder: TransitionBuilder,
    wait: FenceWait,
    dispatch: DispatchFacts,
    registry: Registry,
    jitter: float,
) -> None:
    """Waiting for a busy resource is not an attempt of the retry budget; it has its own bound."""
    contract = registry.verbs.get(dispatch.verb)
    blocks = wait.waited >= registry.fence_wait_limit or contract is None
    if blocks:
        builder.block(
            DispatchState.BLOCKED_FENCE,
            SagaState.BLOCKED_FENCE,
            f"waited {wait.waited.total_seconds():.0f}s (fencing.wait_limit "
            f"{registry.fence_wait_limit.total_seconds():.0f}s) for a fencing resource "
            f"held by {wait.holder}; nothing was sent",
        )
    else:
        assert contract is not None
        builder.retry(fence_wait_delay(contract.retry, dispatch.fence_waits, jitter))
    # the wait's start and, when it blocks, its end are stored on the timeline (a wait that
    # ends in a write-ahead is ended by the write-ahead: store.write_ahead)
    detail = {"resource": wait.resource, "holder": wait.holder}
    if wait.started:
        builder.note(FENCE_WAIT_STARTED, detail)
    if blocks:
        builder.note(
            FENCE_WAIT_ENDED, {**detail, "ended": "blocked", "waits": dispatch.fence_waits}
        )


def _settle_failure(
    builder: TransitionBuilder,
    completion: Completion,
    dispatch: DispatchFacts,
    registry: Registry,
    jitter: float,
) -> None:
    """Every outcome but success: retry, block on uncertainty or a stale fence, or fail,
    under the two budgets of ``core.budgets`` (requests written, and time). An answer only
    the ``answers`` preset classified never settles an earlier uncertain attempt (a plain
    service does not replay by key), and a destination_problem one is retried under its
    time budget, then blocked for a person, never compensated."""
    outcome = completion.outcome
    contract = registry.verbs.get(dispatch.verb)
    policy = contract.retry if contract is not None else None
    budget = retry_budget(dispatch.max_attempts, dispatch.budget_base, contract)
    # the requests written so far, this one included when it may have been
    budget_left = dispatch.attempt - dispatch.unsent - (0 if completion.written else 1) < budget
    time_spent = not_committed_budget_spent(dispatch.budget_elapsed, policy)
    uncertain = dispatch.uncertain_attempt
    at_least_once = dispatch.delivery is Delivery.AT_LEAST_ONCE
    match outcome, completion.preset:
        case OutcomeClass.PERMANENT, PresetClass() if uncertain is not None:
            builder.block(*_UNKNOWN, _preset_cannot_settle(uncertain, completion))
        case _, PresetClass.DESTINATION if uncertain is None:
            _settle_destination_problem(builder, completion, dispatch, contract, jitter)
        case OutcomeClass.UNKNOWN, _ if at_least_once and budget_left and policy:
            builder.transition.uncertain_attempt = _earliest(uncertain, dispatch.attempt)
            builder.retry(retry_delay(policy, dispatch.attempt, jitter, completion.evidence))
        case OutcomeClass.UNKNOWN, _:
            builder.transition.uncertain_attempt = _earliest(uncertain, dispatch.attempt)
            builder.block(*_UNKNOWN, _AT_MOST_ONCE if not at_least_once else _UNKNOWN_SPENT)
        case OutcomeClass.STALE_FENCE, _:
            builder.block(*_FENCE, "the destination rejected the fencing token as stale")
        case OutcomeClass.PERMANENT, _ if uncertain is not None and not at_least_once:
            # A later answer must not mask an earlier attempt that may have committed. An
            # at_least_once destination dedupes and replays by key, so its definite "no" is
            # the answer for the key, earlier attempts included.
            builder.block(*_UNKNOWN, _cannot_settle(uncertain, outcome))
        case OutcomeClass.RETRYABLE, _ if uncertain is not None and not budget_left:
            builder.block(*_UNKNOWN, _cannot_settle(uncertain, outcome))
        case OutcomeClass.RETRYABLE, _ if time_spent and uncertain is not None:
            builder.block(*_UNKNOWN, _cannot_settle(uncertain, outcome))
        case OutcomeClass.RETRYABLE, _ if time_spent:
            builder.fail(_gave_up(policy, completion))
        case OutcomeClass.RETRYABLE, _:
            assert policy is not None  # no policy: the time budget is spent
            _retry_not_committed(builder, completion, dispatch, policy, jitter)
        case _:
            builder.fail(f"permanent failure: {completion.error or 'no detail'}")


_UNKNOWN = (DispatchState.BLOCKED_UNKNOWN, SagaState.BLOCKED_UNKNOWN)
_FENCE = (DispatchState.BLOCKED_FENCE, SagaState.BLOCKED_FENCE)
_AT_MOST_ONCE = "at_most_once: a call that may have reached the destination is never re-sent"
_UNKNOWN_SPENT = "retry budget exhausted with the outcome still unknown"


def _earliest(uncertain: int | None, attempt: int) -> int:
    """The uncertain attempt once ``attempt`` ended unknown: the earliest one stays."""
    return attempt if uncertain is None else min(uncertain, attempt)


def _cannot_settle(uncertain: int, outcome: OutcomeClass) -> str:
    return f"attempt {uncertain} may have committed; a later {outcome.value} cannot settle it"


def _preset_cannot_settle(uncertain: int, completion: Completion) -> str:
    return (
        f"attempt {uncertain} may have committed; a later HTTP {completion.status_code}, "
        'classified only by answers = "http", cannot settle it (a plain service does not '
        "replay by key)"
    )


def _retry_not_committed(
    builder: TransitionBuilder,
    completion: Completion,
    dispatch: DispatchFacts,
    policy: RetryPolicy,
    jitter: float,
) -> None:
    """Retry a call never sent or known not committed: when, and how long its time budget
    has left (the views show when it gives up)."""
    builder.retry(retry_delay(policy, dispatch.attempt, jitter, completion.evidence))
    spent = dispatch.budget_elapsed or timedelta(0)
    builder.transition.gives_up_in = policy.give_up_after - spent


def _gave_up(policy: RetryPolicy | None, completion: Completion) -> str:
    """The stop reason of a call never sent or known not committed whose time budget ran out."""
    last = completion.error or "no detail"
    if policy is None:
        return f"the verb is no longer configured; the last call: {last}"
    spent = format_duration(policy.give_up_after)
    return f"gave up after retry.give_up_after ({spent}) of calls not committed: {last}"


# -- answers classified by the destination's `answers` preset (core/answers.py) --------------


@frozen
class DestinationBudget:
    """The budget a destination_problem answer is retried under: whether it is spent, and how
    far it runs, for a person (the dispatch's last error, the block's reason)."""

    spent: bool
    until: str


def destination_problem_budget(
    dispatch: DispatchFacts, contract: VerbContract | None
) -> DestinationBudget:
    """The retry budget of a dispatch whose destination answered that nothing was committed
    for a reason of its own or of our configuration (401, 403, ...): the time budget of every
    call not committed (``core.budgets``), never the attempt budget."""
    policy = None if contract is None else contract.retry
    spent = not_committed_budget_spent(dispatch.budget_elapsed, policy)
    if policy is None:
        return DestinationBudget(spent, "its verb is no longer configured")
    return DestinationBudget(
        spent, f"retry.give_up_after ({format_duration(policy.give_up_after)})"
    )


def _settle_destination_problem(
    builder: TransitionBuilder,
    completion: Completion,
    dispatch: DispatchFacts,
    contract: VerbContract | None,
    jitter: float,
) -> None:
    """A destination_problem answer (only the `answers` preset classified it): retried under
    its budget, then blocked for a person, never compensated."""
    budget = destination_problem_budget(dispatch, contract)
    answered = f"destination answered {completion.error or 'no detail'}"
    if budget.spent or contract is None:
        builder.block(
            DispatchState.BLOCKED_DESTINATION,
            SagaState.BLOCKED_DESTINATION,
            f"{answered}; retried for {budget.until}: fix the credential or the route, "
            "then retry (or cancel)",
        )
    else:
        _retry_not_committed(builder, completion, dispatch, contract.retry, jitter)
        builder.transition.last_error = f"{answered}; retrying for {budget.until}"


def fence_wait_delay(policy: RetryPolicy, waits: int, jitter: float) -> timedelta:
    """When to look at a busy resource again: the verb's backoff, but never longer than
    FENCE_WAIT_MAX_DELAY, because a release does not wake the waiters (they poll)."""
    return min(backoff_delay(policy, waits, jitter), FENCE_WAIT_MAX_DELAY)


def resumed_stop_reason(
    blocked_from: SagaState, resumed: SagaState, reason: str | None, began_because: str | None
) -> str | None:
    """The stop reason of a blocked saga moved on (by an operator or a late answer).
    Compensating (and compensated) keep the reason compensation began, not the block's;
    running has none (the store clears it); anything the engine decided itself (a new
    failure, a new block) keeps its own."""
    undoing = resumed in (SagaState.COMPENSATING, SagaState.COMPENSATED)
    if blocked_from.is_blocked and undoing and reason is None:
        return began_because
    return reason


def _restore_reason(saga: SagaFacts, transition: Transition) -> Transition:
    update = transition.saga
    if update is not None:
        reason = resumed_stop_reason(
            saga.state, update.state, update.stop_reason, saga.compensation_reason
        )
        transition.saga = SagaUpdate(update.state, reason)
    return transition


def cancel_now(
    saga: SagaFacts, dispatch: DispatchFacts, registry: Registry, reason: str, actor: str
) -> Transition:
    """Operator cancel of a forward ``dispatch`` that cannot have taken effect (queued, or
    retry_wait with no uncertain attempt): its step goes back to pending and compensation
    starts over the succeeded steps (saga compensated with ``reason`` when none). No attempt
    completed, so there is no outcome; the store marks the dispatch canceled itself."""
    builder = TransitionBuilder(saga, dispatch, None, registry, actor)
    builder.transition.dispatch_state = DispatchState.CANCELED
    builder.step(StepState.PENDING, effect_id=dispatch.effect_id)
    builder.start_compensation(reason)
    return builder.transition


def resume_enqueue(saga: SagaFacts, registry: Registry, actor: str) -> Transition:
    """Build the dispatch a saga blocked before creating (contract drift or unresolvable
    compensation arguments at enqueue time), as settle() would have: what the steps' states
    call for now (the next compensation, the latest success first, when the saga was
    compensating: a step failed or was compensated, or a cancel was requested; else every step
    whose dependencies succeeded). Only ``steps``, ``saga``, ``new_dispatches`` and ``events``
    of the result are meaningful."""
    builder = TransitionBuilder(saga, None, None, registry, actor)
    builder.reconcile()
    return _restore_reason(saga, builder.transition)

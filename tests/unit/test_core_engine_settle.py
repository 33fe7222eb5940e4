"""settle(): the retry budget, fence waits and what an answer after an uncertain attempt means
(docs/design.md section 6). Pure: facts in, a Transition out."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from effectusd.core.checker import check
from effectusd.core.engine import (
    FENCE_WAIT_MAX_DELAY,
    Completion,
    DispatchFacts,
    FenceWait,
    SagaFacts,
    StepFacts,
    settle,
)
from effectusd.core.registry import Registry
from effectusd.core.states import (
    Cause,
    Delivery,
    Direction,
    DispatchState,
    OutcomeClass,
    SagaState,
    StepState,
)
from tests.unit.conftest import make_core_verbs

SAGA = "b" * 64
BUDGET = make_core_verbs()["ship"].retry.max_attempts  # live: the loaded verb's budget counts
HOLDER = "dispatch 7 of saga " + "c" * 64 + ", lease owner host:1"


def plan(verb: str) -> dict[str, Any]:
    return {
        "plan_id": "p",
        "steps": [
            {
                "id": "first",
                "verb": "ship",
                "args": {"n": 1},
                "compensate": {"verb": "ship", "args": {"n": 2}},
            },
            {"id": "second", "verb": verb, "args": {"n": 3}, "compensate": "none"},
        ],
    }


def saga(registry: Registry, verb: str) -> SagaFacts:
    checked = check(plan(verb), registry.verbs)
    states = {"first": StepState.SUCCEEDED, "second": StepState.IN_PROGRESS}
    return SagaFacts(
        saga_id=SAGA,
        namespace="default",
        execution_id="x",
        state=SagaState.RUNNING,
        cancel_requested=False,
        plan=checked,
        facts={},
        steps={s.id: StepFacts(s.id, s.sequence, states[s.id]) for s in checked.steps},
    )


def dispatch(
    delivery: Delivery,
    attempt: int,
    uncertain: int | None = None,
    fence_waits: int = 0,
    verb: str = "ship",
) -> DispatchFacts:
    return DispatchFacts(
        dispatch_id=1,
        effect_id="second",
        direction=Direction.FORWARD,
        delivery=delivery,
        verb=verb,
        state=DispatchState.IN_FLIGHT,
        attempt=attempt,
        max_attempts=BUDGET,
        uncertain_attempt=uncertain,
        fence_waits=fence_waits,
    )


def answer(outcome: OutcomeClass, attempt: int, fence_wait: FenceWait | None = None) -> Completion:
    cause = Cause.ANSWERED if fence_wait is None else Cause.FENCE_WAIT
    return Completion(
        1, attempt, "t", outcome, error="declined", cause=cause, fence_wait=fence_wait
    )


VERB_OF = {Delivery.AT_LEAST_ONCE: "ship", Delivery.AT_MOST_ONCE: "notify"}


def decide(
    core_registry: Registry, facts: DispatchFacts, completion: Completion
) -> tuple[DispatchState, SagaState | None, str | None]:
    facts = replace(facts, verb=VERB_OF[facts.delivery])
    transition = settle(completion, facts, saga(core_registry, facts.verb), core_registry, 0.5)
    state = transition.saga.state if transition.saga else None
    reason = transition.saga.stop_reason if transition.saga else None
    return transition.dispatch_state, state, reason


# -- an answer after an uncertain attempt -------------------------------------------------------


def test_at_least_once_permanent_after_uncertain_fails_and_compensates(
    core_registry: Registry,
) -> None:
    facts = dispatch(Delivery.AT_LEAST_ONCE, attempt=2, uncertain=1)
    state, saga_state, reason = decide(core_registry, facts, answer(OutcomeClass.PERMANENT, 2))
    assert (state, saga_state) == (DispatchState.FAILED_PERMANENT, SagaState.COMPENSATING)
    assert reason is not None and "declined" in reason


def test_at_most_once_permanent_after_uncertain_still_blocks(core_registry: Registry) -> None:
    facts = dispatch(Delivery.AT_MOST_ONCE, attempt=2, uncertain=1)
    state, saga_state, reason = decide(core_registry, facts, answer(OutcomeClass.PERMANENT, 2))
    assert (state, saga_state) == (DispatchState.BLOCKED_UNKNOWN, SagaState.BLOCKED_UNKNOWN)
    assert reason is not None and "attempt 1 may have committed" in reason


@pytest.mark.parametrize("delivery", [Delivery.AT_LEAST_ONCE, Delivery.AT_MOST_ONCE])
def test_a_spent_budget_of_unsent_attempts_after_uncertain_blocks(
    core_registry: Registry, delivery: Delivery
) -> None:
    facts = dispatch(delivery, attempt=BUDGET, uncertain=1)
    state, saga_state, _ = decide(core_registry, facts, answer(OutcomeClass.RETRYABLE, BUDGET))
    assert (state, saga_state) == (DispatchState.BLOCKED_UNKNOWN, SagaState.BLOCKED_UNKNOWN)


# -- fence waits --------------------------------------------------------------------------------


def test_a_fence_wait_past_max_attempts_waits_again(core_registry: Registry) -> None:
    # attempt 10, past the verb's budget: every attempt so far found the resource busy
    facts = dispatch(Delivery.AT_LEAST_ONCE, attempt=10, fence_waits=10)
    wait = FenceWait(timedelta(minutes=4), HOLDER)
    transition = settle(
        answer(OutcomeClass.RETRYABLE, 10, wait),
        replace(facts, verb="ship"),
        saga(core_registry, "ship"),
        core_registry,
        0.99,
    )
    assert transition.dispatch_state is DispatchState.RETRY_WAIT
    assert transition.saga is None
    assert transition.retry_delay is not None
    assert timedelta(0) < transition.retry_delay <= FENCE_WAIT_MAX_DELAY


def test_a_fence_wait_past_its_bound_blocks_naming_the_holder(core_registry: Registry) -> None:
    limit = core_registry.fence_wait_limit
    facts = dispatch(Delivery.AT_LEAST_ONCE, attempt=2, fence_waits=2)
    wait = FenceWait(limit, HOLDER)
    state, saga_state, reason = decide(
        core_registry, facts, answer(OutcomeClass.RETRYABLE, 2, wait)
    )
    assert (state, saga_state) == (DispatchState.BLOCKED_FENCE, SagaState.BLOCKED_FENCE)
    assert reason is not None and HOLDER in reason and "nothing was sent" in reason


def test_a_fence_wait_bound_comes_from_the_registry(core_registry: Registry) -> None:
    short = replace(core_registry, fence_wait_limit=timedelta(seconds=30))
    facts = dispatch(Delivery.AT_LEAST_ONCE, attempt=1, fence_waits=1)
    wait = FenceWait(timedelta(seconds=31), HOLDER)
    assert decide(core_registry, facts, answer(OutcomeClass.RETRYABLE, 1, wait))[0] is (
        DispatchState.RETRY_WAIT
    )
    assert decide(short, facts, answer(OutcomeClass.RETRYABLE, 1, wait))[0] is (
        DispatchState.BLOCKED_FENCE
    )


@pytest.mark.parametrize(
    ("attempt", "fence_waits", "expected"),
    [
        (10, 10 - BUDGET + 1, DispatchState.RETRY_WAIT),  # one real attempt short of the budget
        (10, 10 - BUDGET, DispatchState.FAILED_PERMANENT),  # every real attempt made: spent
        (BUDGET, 0, DispatchState.FAILED_PERMANENT),
    ],
)
def test_fence_waits_do_not_count_against_the_retry_budget(
    core_registry: Registry, attempt: int, fence_waits: int, expected: DispatchState
) -> None:
    facts = dispatch(Delivery.AT_LEAST_ONCE, attempt=attempt, fence_waits=fence_waits)
    state, _, _ = decide(core_registry, facts, answer(OutcomeClass.RETRYABLE, attempt))
    assert state is expected

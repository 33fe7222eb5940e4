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
    Delivery,
    Direction,
    DispatchState,
    OutcomeClass,
    SagaState,
    StepState,
)
from effectusd.core.transition import HeldClaim
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


def answer(outcome: OutcomeClass, attempt: int) -> Completion:
    return Completion.answered(HeldClaim(1, attempt, "t"), outcome, error="declined")


def busy(attempt: int, wait: FenceWait) -> Completion:
    return Completion.not_sent(HeldClaim(1, attempt, "t"), wait, "busy")


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
        busy(10, wait),
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
    state, saga_state, reason = decide(core_registry, facts, busy(2, wait))
    assert (state, saga_state) == (DispatchState.BLOCKED_FENCE, SagaState.BLOCKED_FENCE)
    assert reason is not None and HOLDER in reason and "nothing was sent" in reason


def test_a_fence_wait_bound_comes_from_the_registry(core_registry: Registry) -> None:
    short = replace(core_registry, fence_wait_limit=timedelta(seconds=30))
    facts = dispatch(Delivery.AT_LEAST_ONCE, attempt=1, fence_waits=1)
    wait = FenceWait(timedelta(seconds=31), HOLDER)
    assert decide(core_registry, facts, busy(1, wait))[0] is (DispatchState.RETRY_WAIT)
    assert decide(short, facts, busy(1, wait))[0] is (DispatchState.BLOCKED_FENCE)


@pytest.mark.parametrize(
    ("attempt", "unsent", "expected"),
    [
        (10, 10 - BUDGET + 1, DispatchState.RETRY_WAIT),  # one request short of the budget
        (10, 10 - BUDGET, DispatchState.BLOCKED_UNKNOWN),  # every request made: spent
        (BUDGET, 0, DispatchState.BLOCKED_UNKNOWN),
    ],
)
def test_claims_that_ended_unsent_do_not_count_against_max_attempts(
    core_registry: Registry, attempt: int, unsent: int, expected: DispatchState
) -> None:
    facts = replace(dispatch(Delivery.AT_LEAST_ONCE, attempt=attempt), unsent=unsent)
    state, _, _ = decide(core_registry, facts, answer(OutcomeClass.UNKNOWN, attempt))
    assert state is expected


# -- the time budget of calls never sent or known not committed --------------------------------

GIVE_UP = make_core_verbs()["ship"].retry.give_up_after


def not_sent(attempt: int) -> Completion:
    return Completion.answered(
        HeldClaim(1, attempt, "t"),
        OutcomeClass.RETRYABLE,
        error="refused",
        evidence={"sent": "not_sent"},
    )


@pytest.mark.parametrize("delivery", [Delivery.AT_LEAST_ONCE, Delivery.AT_MOST_ONCE])
@pytest.mark.parametrize("sent", [False, True], ids=["not_sent", "refused_retryable"])
def test_a_not_committed_call_is_retried_past_max_attempts_while_time_is_left(
    core_registry: Registry, delivery: Delivery, sent: bool
) -> None:
    attempt = 4 * BUDGET
    completion = answer(OutcomeClass.RETRYABLE, attempt) if sent else not_sent(attempt)
    facts = replace(dispatch(delivery, attempt=attempt), budget_elapsed=GIVE_UP * 0.75)
    state, saga_state, _ = decide(core_registry, facts, completion)
    assert (state, saga_state) == (DispatchState.RETRY_WAIT, None)
    facts = replace(facts, verb=VERB_OF[delivery])
    transition = settle(completion, facts, saga(core_registry, facts.verb), core_registry, 0.5)
    assert transition.gives_up_in == GIVE_UP * 0.25  # what the views show as "gives up at"


@pytest.mark.parametrize("sent", [False, True], ids=["not_sent", "refused_retryable"])
def test_a_spent_time_budget_fails_the_step_and_compensates(
    core_registry: Registry, sent: bool
) -> None:
    completion = answer(OutcomeClass.RETRYABLE, 2) if sent else not_sent(2)
    facts = replace(dispatch(Delivery.AT_LEAST_ONCE, attempt=2), budget_elapsed=GIVE_UP)
    state, saga_state, reason = decide(core_registry, facts, completion)
    assert (state, saga_state) == (DispatchState.FAILED_PERMANENT, SagaState.COMPENSATING)
    assert reason is not None and "retry.give_up_after (24h)" in reason
    assert str(completion.error) in reason  # the last call's error says why


def test_a_budget_not_yet_started_is_not_spent(core_registry: Registry) -> None:
    facts = replace(dispatch(Delivery.AT_MOST_ONCE, attempt=1), budget_elapsed=None)
    assert decide(core_registry, facts, not_sent(1))[0] is DispatchState.RETRY_WAIT


def test_unknown_under_at_least_once_spends_max_attempts_only(core_registry: Registry) -> None:
    # time past give_up_after does not stop the re-sending of an unknown outcome ...
    late = replace(dispatch(Delivery.AT_LEAST_ONCE, attempt=1), budget_elapsed=GIVE_UP * 10)
    assert decide(core_registry, late, answer(OutcomeClass.UNKNOWN, 1))[0] is (
        DispatchState.RETRY_WAIT
    )
    # ... and max_attempts requests written does, however fresh the time budget
    spent = replace(dispatch(Delivery.AT_LEAST_ONCE, attempt=BUDGET), budget_elapsed=timedelta(0))
    assert decide(core_registry, spent, answer(OutcomeClass.UNKNOWN, BUDGET))[0] is (
        DispatchState.BLOCKED_UNKNOWN
    )


def test_a_not_sent_claim_after_an_uncertain_attempt_spends_no_request(
    core_registry: Registry,
) -> None:
    # BUDGET - 1 requests written before this claim: it ended unsent, so one is still left
    attempt = BUDGET + 3
    facts = replace(dispatch(Delivery.AT_LEAST_ONCE, attempt=attempt, uncertain=1), unsent=3)
    assert decide(core_registry, facts, not_sent(attempt))[0] is DispatchState.RETRY_WAIT
    sent = decide(core_registry, facts, answer(OutcomeClass.UNKNOWN, attempt))
    assert sent[0] is DispatchState.BLOCKED_UNKNOWN  # this one was written: the budget is spent


def test_a_spent_time_budget_after_an_uncertain_attempt_blocks_unknown(
    core_registry: Registry,
) -> None:
    facts = replace(
        dispatch(Delivery.AT_LEAST_ONCE, attempt=2, uncertain=1), budget_elapsed=GIVE_UP
    )
    state, saga_state, reason = decide(core_registry, facts, not_sent(2))
    assert (state, saga_state) == (DispatchState.BLOCKED_UNKNOWN, SagaState.BLOCKED_UNKNOWN)
    assert reason is not None and "attempt 1 may have committed" in reason


@pytest.mark.parametrize(
    ("retry_after_s", "expected"),
    [
        (3, timedelta(seconds=3)),  # the destination's delay, shorter than the backoff's cap
        (10**6, make_core_verbs()["ship"].retry.max_backoff),  # capped at max_backoff
    ],
)
def test_retry_after_sets_the_delay_of_an_allowed_retry_capped_at_max_backoff(
    core_registry: Registry, retry_after_s: int, expected: timedelta
) -> None:
    completion = replace(
        answer(OutcomeClass.RETRYABLE, 1), evidence={"retry_after_s": retry_after_s}
    )
    facts = replace(dispatch(Delivery.AT_LEAST_ONCE, attempt=1), verb="ship")
    transition = settle(completion, facts, saga(core_registry, "ship"), core_registry, 0.5)
    assert (transition.dispatch_state, transition.retry_delay) == (
        DispatchState.RETRY_WAIT,
        expected,
    )


def test_retry_after_never_turns_a_refusal_into_a_retry(core_registry: Registry) -> None:
    completion = replace(answer(OutcomeClass.PERMANENT, 1), evidence={"retry_after_s": 1})
    facts = dispatch(Delivery.AT_LEAST_ONCE, attempt=1)
    assert decide(core_registry, facts, completion)[0] is DispatchState.FAILED_PERMANENT


def test_a_fence_wait_stores_its_start_and_its_end_when_it_blocks(core_registry: Registry) -> None:
    def kinds(wait: FenceWait) -> list[tuple[str, dict[str, Any]]]:
        facts = dispatch(Delivery.AT_LEAST_ONCE, attempt=3, fence_waits=3)
        transition = settle(
            busy(3, wait),
            facts,
            saga(core_registry, "ship"),
            core_registry,
            0.5,
        )
        return [(e.kind, dict(e.detail)) for e in transition.events if e.kind.startswith("fence")]

    began = FenceWait(timedelta(0), HOLDER, "account:1", started=True)
    assert kinds(began) == [("fence_wait_started", {"resource": "account:1", "holder": HOLDER})]
    assert kinds(replace(began, started=False, waited=timedelta(seconds=1))) == []  # goes on
    over = FenceWait(core_registry.fence_wait_limit, HOLDER, "account:1")
    assert kinds(over) == [
        (
            "fence_wait_ended",
            {"resource": "account:1", "holder": HOLDER, "ended": "blocked", "waits": 3},
        )
    ]

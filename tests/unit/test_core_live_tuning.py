"""The pure side of pinned vs live: the engine's retry budget follows the loaded verb, the
claim's limits come from the registry, and adoption re-pins a plan (new digest)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from effectusd.core.adoption import adopt, drifted_verbs
from effectusd.core.checker import check, verify_checked
from effectusd.core.contracts import VerbContract
from effectusd.core.durations import parse_duration
from effectusd.core.engine import Completion, DispatchFacts, settle
from effectusd.core.operator_decisions import Refused
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
from tests.unit.test_core_operator_decisions import SAGA, saga_facts


def _retrying(attempt: int, budget_base: int | None) -> DispatchFacts:
    """charge's forward dispatch, enqueued with max_attempts 3, after ``attempt`` attempts."""
    return DispatchFacts(
        dispatch_id=1,
        effect_id="charge",
        direction=Direction.FORWARD,
        delivery=Delivery.AT_MOST_ONCE,
        verb="charge",
        state=DispatchState.IN_FLIGHT,
        attempt=attempt,
        max_attempts=3,
        uncertain_attempt=None,
        budget_base=budget_base,
    )


def _tuned(registry: Registry, **retry: Any) -> Registry:
    charge = registry.verbs["charge"]
    tuned = charge.model_copy(update={"retry": charge.retry.model_copy(update=retry)})
    assert tuned.contract_hash == charge.contract_hash  # tuning is not a contract change
    return Registry({**registry.verbs, "charge": tuned})


@pytest.mark.parametrize(
    ("attempt", "budget_base", "live_max", "expected"),
    [
        (3, 0, 5, DispatchState.RETRY_WAIT),  # raised: the row's 3 no longer limits it
        (2, 0, 2, DispatchState.BLOCKED_UNKNOWN),  # lowered to the requests made: spent
        (2, 0, 1, DispatchState.BLOCKED_UNKNOWN),  # lowered below them: spent
        (4, 3, 2, DispatchState.RETRY_WAIT),  # an operator's fresh budget counts from 3
        (2, None, 1, DispatchState.RETRY_WAIT),  # a row from before live budgets keeps its 3
        (3, None, 9, DispatchState.BLOCKED_UNKNOWN),
    ],
)
def test_an_unknown_outcome_is_judged_against_the_loaded_retry_budget(
    core_registry: Registry,
    checkout_plan: dict[str, Any],
    attempt: int,
    budget_base: int | None,
    live_max: int,
    expected: DispatchState,
) -> None:
    # max_attempts bounds the re-sending of a call that may have committed (at_least_once)
    registry = _tuned(core_registry, max_attempts=live_max)
    facts = saga_facts(
        registry, checkout_plan, {"charge": StepState.IN_PROGRESS, "ship": StepState.PENDING}
    )
    dispatch = replace(_retrying(attempt, budget_base), delivery=Delivery.AT_LEAST_ONCE)
    completion = Completion.answered(HeldClaim(1, attempt, "t"), OutcomeClass.UNKNOWN)
    transition = settle(completion, dispatch, facts, registry, 0.0)
    assert transition.dispatch_state is expected


@pytest.mark.parametrize(
    ("elapsed", "live_give_up", "expected"),
    [
        (timedelta(hours=2), "1h", DispatchState.FAILED_PERMANENT),  # lowered below it: spent
        (timedelta(hours=2), "3h", DispatchState.RETRY_WAIT),
        (timedelta(hours=30), "2d", DispatchState.RETRY_WAIT),  # raised past the default
    ],
)
def test_a_retryable_failure_is_judged_against_the_loaded_give_up_after(
    core_registry: Registry,
    checkout_plan: dict[str, Any],
    elapsed: timedelta,
    live_give_up: str,
    expected: DispatchState,
) -> None:
    registry = _tuned(core_registry, give_up_after=parse_duration(live_give_up))
    facts = saga_facts(
        registry, checkout_plan, {"charge": StepState.IN_PROGRESS, "ship": StepState.PENDING}
    )
    dispatch = replace(_retrying(9, 0), budget_elapsed=elapsed)  # past max_attempts: no matter
    completion = Completion.answered(HeldClaim(1, 9, "t"), OutcomeClass.RETRYABLE)
    transition = settle(completion, dispatch, facts, registry, 0.0)
    assert transition.dispatch_state is expected
    if expected is DispatchState.FAILED_PERMANENT:
        assert transition.saga is not None
        assert "retry.give_up_after (1h)" in str(transition.saga.stop_reason)


def test_the_claim_takes_each_verbs_live_timeout_and_budget(core_registry: Registry) -> None:
    limits = core_registry.live_limits()
    assert limits["charge"] == (2000, 3)  # the verb's own timeout
    assert limits["ship"] == (30_000, 7)  # no verb timeout: its destination's
    assert limits["notify"] == (10_000, 5)  # neither: the default


def test_adoption_repins_every_pin_of_the_verb_and_recomputes_the_digest(
    core_verbs: dict[str, VerbContract], checkout_plan: dict[str, Any]
) -> None:
    checked = check(checkout_plan, core_verbs)
    moved = core_verbs["refund"].model_copy(update={"path": "/v2/charges/{args.charge_id}"})
    live = {**core_verbs, "refund": moved}
    assert drifted_verbs(checked, live) == ["refund"]
    adoption = adopt(SAGA, checked, live, ["refund"])
    assert [(r.effect_id, r.direction, r.to_hash) for r in adoption.repins] == [
        ("charge", Direction.COMPENSATION, moved.contract_hash)
    ]
    assert adoption.plan.plan_digest != checked.plan_digest
    assert verify_checked(adoption.plan, live) == []  # a plan that checks against the live verbs
    assert adoption.plan == check(checkout_plan, live)  # the same as checking it afresh
    with pytest.raises(Refused, match="nothing to adopt"):
        adopt(SAGA, adoption.plan, live, ["refund"])
    with pytest.raises(Refused, match="not in the loaded config"):
        adopt(SAGA, checked, live, ["gone"])


def test_a_saga_state_unrelated_to_tuning_is_left_alone(
    core_registry: Registry, checkout_plan: dict[str, Any]
) -> None:
    """A success under a tuned registry enqueues the next step; it does not block."""
    registry = _tuned(core_registry, max_attempts=9, initial_backoff="3s")
    facts = saga_facts(
        core_registry, checkout_plan, {"charge": StepState.IN_PROGRESS, "ship": StepState.PENDING}
    )
    completion = Completion.answered(
        HeldClaim(1, 1, "t"), OutcomeClass.SUCCESS, result={"charge_id": "c-1"}
    )
    transition = settle(completion, _retrying(1, 0), facts, registry, 0.0)
    assert transition.saga is None or transition.saga.state is not SagaState.BLOCKED_CONTRACT
    assert [d.effect_id for d in transition.new_dispatches] == ["ship"]

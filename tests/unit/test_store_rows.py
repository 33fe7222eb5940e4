"""TransitionRows: a batch's writes, one row per target, equal to applying them in order."""

from __future__ import annotations

from typing import Any

import pytest

from effectusd.core.checker import check
from effectusd.core.engine import Completion, StepUpdate, Transition
from effectusd.core.plan import CheckedPlan
from effectusd.core.states import DispatchState, OutcomeClass, SagaState, StepState
from effectusd.core.timeline import ON_ATTEMPT
from effectusd.core.transition import HeldClaim, Settled, Success
from effectusd.store.rows import TransitionRows, may_cancel_siblings, plan_steps
from tests.unit.conftest import make_core_verbs

ROW = {"saga_id": "s" * 64, "lease_token": "t"}
HELD = HeldClaim(1, 1, "t")


def test_a_success_writes_its_result_and_order_on_its_dispatch_row_and_no_step_row() -> None:
    # The step moves are read from the dispatch rows: no step row is written for a success.
    transition = Transition(DispatchState.SUCCEEDED, success=Success({"id": 7}, 2))
    rows = TransitionRows()
    rows.apply(
        Completion.answered(HELD, OutcomeClass.SUCCESS), {**ROW, "effect_id": "charge"}, transition
    )
    assert rows.steps == []
    [dispatch] = rows.dispatches
    assert (dispatch["result"], dispatch["succeeded_order"]) == ('{"id": 7}', 2)


def test_a_null_result_is_stored_as_json_null_and_a_failure_stores_none() -> None:
    success = Transition(DispatchState.SUCCEEDED, success=Success(None, 1))
    failure = Transition(DispatchState.FAILED_PERMANENT)
    rows = TransitionRows()
    row = {**ROW, "effect_id": "charge"}
    rows.apply(Completion.answered(HELD, OutcomeClass.SUCCESS), row, success)
    failed = Completion.answered(HeldClaim(2, 1, "t"), OutcomeClass.PERMANENT)
    rows.apply(failed, {**row, "saga_id": "x"}, failure)
    assert [(d["result"], d["succeeded_order"]) for d in rows.dispatches] == [
        ("null", 1),
        (None, None),
    ]
    assert rows.steps == []


def test_a_step_failed_at_enqueue_is_kept_on_its_row_once_per_batch() -> None:
    # No dispatch can say it: its arguments could not be resolved, so none was written.
    transition = Transition(
        DispatchState.SUCCEEDED,
        steps=[StepUpdate("charge", StepState.FAILED)],
        success=Success({"id": 1}, 1),
    )
    rows = TransitionRows()
    rows.apply(
        Completion.answered(HELD, OutcomeClass.SUCCESS), {**ROW, "effect_id": "reserve"}, transition
    )
    assert rows.steps == [{"saga_id": ROW["saga_id"], "effect_id": "charge", "state": "failed"}]


def test_the_attempt_row_carries_the_settlement_and_what_rides_on_it_per_the_table() -> None:
    settled = Settled(DispatchState.SUCCEEDED, "engine", StepState.SUCCEEDED, SagaState.COMPLETED)
    rows = TransitionRows()
    rows.apply(
        Completion.answered(HeldClaim(1, 2, "t"), OutcomeClass.SUCCESS),
        {**ROW, "effect_id": "a"},
        Transition(DispatchState.SUCCEEDED, settled=settled),
    )
    [attempt] = rows.attempts
    assert {c.column: attempt[c.column] for c in ON_ATTEMPT} == {
        "settled_to": "succeeded",
        "settled_step": "succeeded",
        "settled_saga": "completed",
    }
    assert attempt["settled_actor"] == "engine" and rows.events == []


def test_a_settlement_entry_no_row_can_carry_in_its_place_is_refused() -> None:
    """An operator's write leaves the attempt row alone: an entry it should carry would be
    lost, so the writer refuses it (the builder carries none there); and a second one of a
    saga in one batch would go before the first's events (a batch settles a saga once)."""
    carried = Transition(DispatchState.SUCCEEDED, settled=Settled(DispatchState.SUCCEEDED, "x"))
    with pytest.raises(ValueError, match="no row to carry it"):
        TransitionRows().apply(
            Completion.answered(HELD, OutcomeClass.SUCCESS), ROW, carried, attempt=False
        )
    rows = TransitionRows()
    rows.apply(Completion.answered(HELD, OutcomeClass.SUCCESS), ROW, carried)
    with pytest.raises(ValueError, match="no row to carry it"):
        rows.apply(Completion.answered(HeldClaim(2, 1, "t"), OutcomeClass.SUCCESS), ROW, carried)


def test_a_second_late_answer_for_one_attempt_replaces_the_first() -> None:
    rows = TransitionRows()
    rows.late(Completion.answered(HeldClaim(3, 2, "t"), OutcomeClass.UNKNOWN, error="first"))
    rows.late(Completion.answered(HeldClaim(3, 2, "t"), OutcomeClass.SUCCESS, error="second"))
    rows.late(Completion.answered(HeldClaim(3, 1, "t"), OutcomeClass.UNKNOWN))
    assert [(r["attempt"], r["outcome"], r["error"]) for r in rows.lates] == [
        (2, "success", "second"),
        (1, "unknown_outcome", None),
    ]


def _saga_row(steps: list[dict[str, Any]]) -> dict[str, Any]:
    plan = check({"plan_id": "p", "steps": steps}, make_core_verbs())
    return {"plan_digest": plan.plan_digest, "plan": plan.document()}


def test_only_a_saga_with_parallel_steps_has_its_unsent_siblings_locked() -> None:
    # The recorder locks a saga's forward dispatches not yet sent only where the engine may
    # cancel one (a plan with `after`); an unreadable plan is locked as if it could.
    first = {"id": "first", "verb": "ship", "args": {}, "compensate": "none"}
    second = {"id": "second", "verb": "ship", "args": {}, "compensate": "none"}
    sequential = _saga_row([first, second])
    parallel = _saga_row([first, {**second, "after": []}])
    plans: dict[str, CheckedPlan] = {}
    assert not may_cancel_siblings(sequential, plans)
    assert may_cancel_siblings(parallel, plans)
    # the plans read are kept by digest: lock_sagas need not send them again
    assert set(plans) == {sequential["plan_digest"], parallel["plan_digest"]}
    assert not may_cancel_siblings({**sequential, "plan": None}, plans)
    assert may_cancel_siblings({"plan_digest": "unknown", "plan": {"steps": "?"}}, plans)


def _forward(effect_id: str, state: str, **more: Any) -> dict[str, Any]:
    row = {"effect_id": effect_id, "direction": "forward", "state": state, "uncertain": False}
    return {"result": None, "succeeded_order": None, **row, **more}


def test_a_sagas_steps_are_its_plans_each_read_from_its_dispatches_or_its_kept_row() -> None:
    names = ["a", "b", "c", "d", "e"]
    step = {"verb": "ship", "args": {}, "compensate": "none"}
    plan = CheckedPlan.model_validate(_saga_row([{"id": n, **step} for n in names])["plan"])
    rows = [
        _forward("a", "succeeded", result={"id": 1}, succeeded_order=1),
        {**_forward("a", "queued"), "direction": "compensation"},
        _forward("b", "succeeded", result=None, succeeded_order=2),
        {"effect_id": "b", "direction": None, "state": "in_progress"},  # an older saga's row
        _forward("c", "blocked_unknown", uncertain=True),
        {"effect_id": "d", "direction": None, "state": "failed"},  # failed at enqueue
    ]  # e: no dispatch, no row
    steps = plan_steps(plan, reversed(rows))
    assert list(steps) == names  # the plan's order, whatever the rows'
    assert [(s.sequence, s.state, s.dispatch, s.uncertain) for s in steps.values()] == [
        (0, StepState.COMPENSATING, DispatchState.SUCCEEDED, False),
        (1, StepState.SUCCEEDED, DispatchState.SUCCEEDED, False),  # its row's state unread
        (2, StepState.IN_PROGRESS, DispatchState.BLOCKED_UNKNOWN, True),
        (3, StepState.FAILED, None, False),
        (4, StepState.PENDING, None, False),
    ]
    assert [(s.result, s.succeeded_order) for s in steps.values()][:2] == [
        ({"id": 1}, 1),
        (None, 2),
    ]

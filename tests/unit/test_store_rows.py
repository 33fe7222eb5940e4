"""TransitionRows: a batch's writes, one row per target, equal to applying them in order."""

from __future__ import annotations

from effectusd.core.engine import Completion, StepUpdate, Transition
from effectusd.core.states import DispatchState, OutcomeClass, StepState
from effectusd.store.rows import TransitionRows

ROW = {"saga_id": "s" * 64, "lease_token": "t"}


def test_two_updates_of_one_step_merge_into_the_state_they_leave_behind() -> None:
    # A forward success with a cancel pending: the step succeeds (result kept) and at once
    # starts compensating. A set-based UPDATE applies one source row per step, so the rows
    # must already be merged.
    transition = Transition(
        DispatchState.SUCCEEDED,
        steps=[
            StepUpdate("charge", StepState.SUCCEEDED, {"id": 7}, set_result=True),
            StepUpdate("charge", StepState.COMPENSATING),
            StepUpdate("ship", StepState.IN_PROGRESS, args='{"a":1}', args_hash="h" * 64),
        ],
    )
    rows = TransitionRows()
    rows.apply(Completion(1, 1, "t", OutcomeClass.SUCCESS), ROW, transition)
    assert [(r["effect_id"], r["state"]) for r in rows.steps] == [
        ("charge", "compensating"),
        ("ship", "in_progress"),
    ]
    charge = rows.steps[0]
    assert charge["set_result"] is True and charge["result"] == '{"id": 7}'
    assert rows.steps[1]["args"] == '{"a":1}'


def test_a_second_late_answer_for_one_attempt_replaces_the_first() -> None:
    rows = TransitionRows()
    rows.late(Completion(3, 2, "t", OutcomeClass.UNKNOWN, error="first"))
    rows.late(Completion(3, 2, "t", OutcomeClass.SUCCESS, error="second"))
    rows.late(Completion(3, 1, "t", OutcomeClass.UNKNOWN))
    assert [(r["attempt"], r["outcome"], r["error"]) for r in rows.lates] == [
        (2, "success", "second"),
        (1, "unknown_outcome", None),
    ]

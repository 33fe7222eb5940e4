"""A step's state read from its dispatches (effectusd.core.steps, migration 10016): the table
of every state the engine leaves a step's dispatches in. That the derived state is the state
the engine's step moves put a step in, after every move, is the simulator's property
(tests/unit/saga_simulator.py, run by the property tests)."""

from __future__ import annotations

import pytest

from effectusd.core.states import DispatchState as D
from effectusd.core.states import StepState as S
from effectusd.core.steps import STEP_STATE_OF, step_state

LIVE = [D.QUEUED, D.IN_FLIGHT, D.RETRY_WAIT, D.BLOCKED_UNKNOWN, D.BLOCKED_FENCE]


@pytest.mark.parametrize("kept", [S.PENDING, S.FAILED])
def test_a_step_without_a_dispatch_is_what_its_row_keeps(kept: S) -> None:
    assert step_state(None, None, kept) is kept


@pytest.mark.parametrize("forward", [*LIVE, D.BLOCKED_CONTRACT])
def test_a_step_whose_forward_dispatch_is_live_or_blocked_is_in_progress(forward: D) -> None:
    assert step_state(forward, None) is S.IN_PROGRESS


@pytest.mark.parametrize(
    ("forward", "state"),
    [(D.SUCCEEDED, S.SUCCEEDED), (D.FAILED_PERMANENT, S.FAILED), (D.CANCELED, S.PENDING)],
)
def test_a_settled_forward_dispatch_says_how_its_step_ended(forward: D, state: S) -> None:
    # the row's own state is read only without a dispatch: a stale one changes nothing
    assert step_state(forward, None, S.FAILED) is state
    assert step_state(forward, None) is state


@pytest.mark.parametrize("compensation", [*LIVE, D.BLOCKED_CONTRACT, D.FAILED_PERMANENT])
def test_a_step_is_compensating_from_its_compensations_enqueue_until_it_succeeds(
    compensation: D,
) -> None:
    assert step_state(D.SUCCEEDED, compensation) is S.COMPENSATING


def test_a_succeeded_compensation_leaves_its_step_compensated() -> None:
    assert step_state(D.SUCCEEDED, D.SUCCEEDED) is S.COMPENSATED


def test_the_readers_table_gives_what_step_state_gives_for_every_pair_with_a_dispatch() -> None:
    states = (None, *D)
    for forward in states:
        for compensation in states:
            if forward is None and compensation is None:
                assert (forward, compensation) not in STEP_STATE_OF  # the kept state's case
            else:
                expected = step_state(forward, compensation, S.FAILED)
                assert STEP_STATE_OF[forward, compensation] is expected

"""The console's saga-wide forms are what the operator decisions allow: retry where the state
admits it, cancel where cancel can act (a running saga not yet asked to cancel, a saga
blocked_destination on a forward step), adopt contract for blocked_contract."""

from __future__ import annotations

import re

import pytest

from effectusd.console.forms import saga_forms
from effectusd.console.service import SAGA_ACTIONS
from effectusd.core.operator_decisions import Action, offered_actions
from effectusd.core.states import Direction, SagaState

FORWARD = [Direction.FORWARD]
COMPENSATION = [Direction.COMPENSATION]
# What contract_actions gives a blocked_contract saga whose pinned contracts are loaded again.
CONTRACT = (Action.RETRY, Action.ADOPT_CONTRACT)


def offered(state: str, cancel_requested: bool, blocking: list[Direction]) -> list[str]:
    actions = offered_actions(SagaState(state), CONTRACT, blocking)
    names = [SAGA_ACTIONS[action] for action in actions]
    html = str(saga_forms("s" * 64, names, "csrf-token", not cancel_requested))
    return re.findall(r'data-action="([a-z-]+)"', html)


@pytest.mark.parametrize(
    ("state", "cancel_requested", "blocking", "forms"),
    [
        ("blocked_destination", False, FORWARD, ["retry", "cancel"]),
        ("blocked_destination", False, COMPENSATION, ["retry"]),
        ("blocked_fence", False, FORWARD, ["retry"]),
        ("blocked_contract", False, FORWARD, ["retry", "adopt-contract"]),
        ("blocked_compensation", False, COMPENSATION, ["retry"]),
        ("blocked_unknown", False, FORWARD, []),
        ("running", False, [], ["cancel"]),
        ("running", True, [], []),
        ("compensating", False, [], []),
    ],
)
def test_the_forms_offered_are_the_operator_decisions(
    state: str, cancel_requested: bool, blocking: list[Direction], forms: list[str]
) -> None:
    assert offered(state, cancel_requested, blocking) == forms

"""The console's saga-wide forms are what the operator decisions allow: retry where the state
admits it, cancel where cancel can act (a running saga not yet asked to cancel, a saga
blocked_destination on a forward step), adopt contract for blocked_contract."""

from __future__ import annotations

import re

import pytest

from effectusd.console.forms import saga_forms

FORWARD = [{"direction": "forward"}]
COMPENSATION = [{"direction": "compensation"}]


def offered(state: str, cancel_requested: bool, blocking: list[dict[str, str]]) -> list[str]:
    html = str(saga_forms("s" * 64, state, "csrf-token", cancel_requested, blocking))
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
    state: str, cancel_requested: bool, blocking: list[dict[str, str]], forms: list[str]
) -> None:
    assert offered(state, cancel_requested, blocking) == forms

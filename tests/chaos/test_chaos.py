"""The chaos suite, short version (CI). `make chaos` runs the long one and prints the table."""

from __future__ import annotations

import pytest

from tests.chaos.runner import run_scenario
from tests.chaos.scenarios import SHORT, Scenario

pytestmark = [pytest.mark.chaos, pytest.mark.postgres]

# A scenario that restarts PostgreSQL restarts it for every test worker: it runs alone.
SCENARIOS = [
    pytest.param(s, id=s.name, marks=[pytest.mark.serial] if s.restart_postgres else [])
    for s in SHORT
]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_invariants_hold_under_faults(scenario: Scenario, database_url: str) -> None:
    report = run_scenario(scenario)
    assert not report.violations, report
    assert report.lost == 0
    if scenario.faults:
        assert report.kills > 0, "the fault points never fired"

"""A probe path that can identify its dispatch (docs/design.md section 7, Probes): one with no
placeholder is refused at load, one without {key} loads with a warning, and one that a step's
literal arguments or a saga's facts can never render is refused when the plan is checked or
the saga submitted, naming the step, never the value."""

from __future__ import annotations

from typing import Any

import pytest

from effectusd.config import Config, ConfigError, parse_config
from effectusd.core.checker import PlanCheckError, check
from effectusd.core.submission import SubmitError, SubmitRows, prepare_submission

SECRET = "s3cret-" * 430  # 3,010 characters: a fact no path can carry


def config(probe_path: str) -> Config:
    return parse_config(
        {
            "destinations": {"d": {"base_url": "http://127.0.0.1:9"}},
            "verbs": {"pay": {"destination": "d", "path": "/pay", "probe": {"path": probe_path}}},
        }
    )


def plan(order: Any, *, steps: int = 1) -> dict[str, Any]:
    """``steps`` steps of ``pay`` with ``order`` as their argument; the fact ``region``."""
    return {
        "plan_id": "p",
        "facts": {"region": "string"},
        "steps": [
            {"id": f"s{i}", "verb": "pay", "args": {"order": order}, "compensate": "none"}
            for i in range(1, steps + 1)
        ],
    }


def submit(probe_path: str, order: Any, region: str, *, steps: int = 1) -> SubmitRows:
    configured = config(probe_path)
    checked = check(plan(order, steps=steps), configured.verbs)
    return prepare_submission(checked, configured.registry(), "ns", "x-1", {"region": region})


def test_a_probe_path_with_no_placeholder_is_refused_at_load_saying_why() -> None:
    with pytest.raises(ConfigError) as refused:
        config("/charges/by-reference")
    assert "verbs.pay.probe.path: names no placeholder, so one answer would settle every" in (
        str(refused.value)
    )


def test_a_probe_path_without_key_loads_with_a_warning_and_one_with_key_without() -> None:
    assert config("/charges/{args.order}").warnings() == [
        "verbs.pay.probe.path names no {key}: one answer is read for every blocked dispatch "
        "of the verb whose arguments and facts fill it alike; put {key} in it"
    ]
    assert config("/charges/{key}/{args.order}").warnings() == []


@pytest.mark.parametrize("order", ["..", "/", "", SECRET], ids=["dots", "slash", "empty", "long"])
def test_check_refuses_a_literal_argument_that_can_never_fill_the_probe_path(order: str) -> None:
    configured = config("/charges/{key}/{args.order}")
    with pytest.raises(PlanCheckError) as refused:
        check(plan(order), configured.verbs)
    [issue] = refused.value.issues
    assert issue.path.startswith("steps[0]")
    assert SECRET not in str(refused.value) and "/charges/{key}/{args.order}" in issue.message


@pytest.mark.parametrize("region", ["..", "/", "", SECRET], ids=["dots", "slash", "empty", "long"])
@pytest.mark.parametrize("steps", [1, 2], ids=["first_step", "later_step"])
def test_submit_refuses_a_fact_that_can_never_fill_the_probe_path_naming_the_step(
    region: str, steps: int
) -> None:
    with pytest.raises(SubmitError) as refused:
        submit("/charges/{key}/{facts.region}", "o-1", region, steps=steps)
    assert f"step 's{steps}' (forward): template '/charges/{{key}}/{{facts.region}}'" in str(
        refused.value
    )
    assert SECRET not in str(refused.value)


def test_a_probe_path_its_facts_fill_is_submitted() -> None:
    rows = submit("/charges/{key}/{facts.region}/{args.order}", "o-1", "eu", steps=2)
    assert [d.effect_id for d in rows.first_dispatches] == ["s1"]


def test_an_argument_only_a_result_decides_is_left_to_the_probe() -> None:
    configured = config("/charges/{key}/{args.order}")
    steps = plan("o-1", steps=2)
    steps["steps"][1]["args"] = {"order": {"$result": "s1", "path": "/id"}}
    checked = check(steps, configured.verbs)
    prepare_submission(checked, configured.registry(), "ns", "x-1", {"region": "eu"})

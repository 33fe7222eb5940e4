"""Plans with `after` (docs/design.md section 4, "Parallel steps"): the format, the digest of
plans without it, and what the checker refuses, every problem at once."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from effectusd.core.checker import CheckIssue, PlanCheckError, check
from effectusd.core.contracts import VerbContract
from effectusd.core.graph import PlanGraph, cycles, dependencies
from effectusd.core.plan import CheckedPlan, CheckedStep
from effectusd.core.registry import Registry
from effectusd.core.submission import SubmitError, as_spec, ensure_checked, prepare_submission
from tests.unit.conftest import CHECKOUT_PLAN

Plan = dict[str, Any]

# The docs/design.md checkout plan's digest before `after` existed: it must never move.
CHECKOUT_DIGEST = "113e3414950358745b44faf10a9947407527f71445d8c2e3cfb2fff2ae5283da"


def step(name: str, after: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"id": name, "verb": "ship", "args": {"n": name}, "compensate": "none"}
    if after is not None:
        body["after"] = after
    return {**body, **extra}


def fan_out() -> Plan:
    """reserve-a and reserve-b in parallel after start, charge after both."""
    return {
        "plan_id": "fan",
        "steps": [
            step("start"),
            step("reserve-a", ["start"]),
            step("reserve-b", ["start"]),
            step(
                "charge",
                ["reserve-a", "reserve-b"],
                args={"a": {"$result": "reserve-a", "path": "/id"}},
            ),
        ],
    }


def issues_of(plan: Plan, verbs: dict[str, VerbContract]) -> list[CheckIssue]:
    with pytest.raises(PlanCheckError) as excinfo:
        check(plan, verbs)
    return excinfo.value.issues


def test_a_plan_without_after_keeps_its_digest_and_document(
    core_verbs: dict[str, VerbContract],
) -> None:
    checked = check(copy.deepcopy(CHECKOUT_PLAN), core_verbs)
    assert checked.plan_digest == CHECKOUT_DIGEST
    assert all("after" not in s for s in checked.document()["steps"])
    assert checked.is_sequential


def test_after_is_kept_in_the_checked_plan_and_round_trips(
    core_verbs: dict[str, VerbContract], core_registry: Registry
) -> None:
    checked = check(fan_out(), core_verbs)
    assert not checked.is_sequential
    assert checked.step("charge").after == ("reserve-a", "reserve-b")
    assert checked.step("start").after is None
    steps = checked.document()["steps"]
    assert isinstance(steps, list) and "after" not in steps[0] and "after" in steps[1]
    assert ensure_checked(checked.document(), core_registry) == checked
    assert as_spec(checked).steps[3].after == ["reserve-a", "reserve-b"]


def test_after_changes_the_digest(core_verbs: dict[str, VerbContract]) -> None:
    chain = {"plan_id": "c", "steps": [step("a"), step("b")]}
    explicit = {"plan_id": "c", "steps": [step("a"), step("b", ["a"])]}
    assert check(chain, core_verbs).plan_digest != check(explicit, core_verbs).plan_digest


def test_no_after_means_after_the_previous_step_and_empty_after_means_at_once() -> None:
    checked_like = [
        _Step("a", None),
        _Step("b", []),
        _Step("c", None),
        _Step("d", ["a", "c"]),
    ]
    assert dependencies(checked_like) == {"a": (), "b": (), "c": ("b",), "d": ("a", "c")}
    graph = PlanGraph.of(checked_like)
    assert graph.descendants["b"] == {"c", "d"}
    assert graph.descendants["a"] == {"d"}
    assert graph.descendants["d"] == frozenset()


def test_after_may_name_a_later_step_when_there_is_no_cycle(
    core_verbs: dict[str, VerbContract],
) -> None:
    plan = {
        "plan_id": "p",
        "steps": [step("b", ["a"], args={"x": {"$result": "a"}}), step("a", [])],
    }
    assert check(plan, core_verbs).step("b").after == ("a",)


def test_every_after_problem_is_reported_at_once_by_path(
    core_verbs: dict[str, VerbContract],
) -> None:
    plan = {
        "plan_id": "p",
        "steps": [
            step("a", ["c"]),  # a → c → b → a: a cycle
            step("b", ["a", "a", "ghost"]),
            step("c"),  # no after: after b
            step("d", ["d"]),
            step("e", [], verb="nope"),
        ],
    }
    issues = {(issue.path, issue.message) for issue in issues_of(plan, core_verbs)}
    paths = {path for path, _ in issues}
    assert ("steps[1].after[1]", "step 'a' is named twice") in issues
    assert ("steps[1].after[2]", "unknown step 'ghost'") in issues
    assert ("steps[3].after[0]", "step 'd' cannot run after itself") in issues
    assert {"steps[0].after", "steps[1].after", "steps[2]", "steps[4].verb"} <= paths
    cycle = [m for p, m in issues if p == "steps[2]"]
    assert cycle and "'a', 'b', 'c'" in cycle[0] and "no `after`" in cycle[0]


def test_a_result_of_a_step_that_is_not_a_dependency_is_refused(
    core_verbs: dict[str, VerbContract],
) -> None:
    plan = fan_out()
    plan["steps"][2]["args"] = {"a": {"$result": "reserve-a"}}  # a sibling, not a dependency
    plan["steps"][2]["compensate"] = {"verb": "ship", "args": {"b": {"$result": "reserve-b"}}}
    issues = issues_of(plan, core_verbs)
    assert [(i.path, "`after`" in i.message) for i in issues] == [("steps[2].args.a", True)]
    assert "does not run before this one" in issues[0].message


def test_a_result_of_a_transitive_dependency_is_allowed(
    core_verbs: dict[str, VerbContract],
) -> None:
    plan = fan_out()
    plan["steps"][3]["args"] = {"s": {"$result": "start"}, "b": {"$result": "reserve-b"}}
    assert check(plan, core_verbs).step("charge").args["s"] == {"$result": "start"}


def test_cycles_finds_each_group_of_steps_waiting_for_each_other() -> None:
    deps = {"a": ("b",), "b": ("a",), "c": ("a",), "d": ("e",), "e": ("d", "x")}
    assert cycles(deps) == [["a", "b"], ["d", "e"]]
    chain = {f"s{i}": (f"s{i - 1}",) if i else () for i in range(5000)}
    assert cycles(chain) == []  # iterative: a long plan does not hit the recursion limit


def test_submit_enqueues_every_root_of_a_parallel_plan_and_starts_nothing_else(
    core_verbs: dict[str, VerbContract], core_registry: Registry
) -> None:
    plan = fan_out()
    plan["steps"].insert(1, step("audit", []))  # a second root, listed after `start`
    rows = prepare_submission(check(plan, core_verbs), core_registry, "default", "x-1", {})
    assert [(d.effect_id, d.direction) for d in rows.first_dispatches] == [
        ("start", "forward"),
        ("audit", "forward"),
    ]
    assert len({d.idempotency_key for d in rows.first_dispatches}) == 2


def test_submit_refuses_a_parallel_plan_whose_root_cannot_be_resolved_naming_it(
    core_verbs: dict[str, VerbContract], core_registry: Registry
) -> None:
    plan = fan_out()
    plan["facts"] = {"order": "string", "amount": "integer"}
    args = {"order": {"$fact": "order"}, "currency": "EUR", "amount": {"$fact": "amount"}}
    plan["steps"].insert(1, step("audit", [], args=args, verb="charge"))
    checked = check(plan, core_verbs)
    with pytest.raises(SubmitError, match="step 'audit'") as excinfo:  # amount below 1
        prepare_submission(checked, core_registry, "default", "x-1", {"order": "o", "amount": 0})
    assert "start" not in str(excinfo.value)


class _Step:
    def __init__(self, name: str, after: list[str] | None) -> None:
        self.id = name
        self.after = after


def test_a_checked_plans_lookups_are_worked_out_once_and_stay_out_of_its_document() -> None:
    """``step`` and ``is_sequential`` are cached on the (frozen) plan: the first step of an id
    is found, an unknown id is a KeyError, and neither the plan's dump, digest nor equality
    sees the cache."""
    steps = [
        CheckedStep(id=n, sequence=i, verb="ship", contract_hash="h", args={}, compensate=None)
        for i, n in enumerate(["a", "b", "a"])
    ]
    body = {"plan_id": "p", "facts": {}, "steps": steps, "plan_digest": ""}
    plan = CheckedPlan.model_validate(
        {**body, "plan_digest": CheckedPlan(**body).computed_digest()}
    )
    fresh = CheckedPlan.model_validate(plan.document())
    assert plan.step("a").sequence == 0 and plan.step("b").sequence == 1
    with pytest.raises(KeyError):
        plan.step("c")
    assert plan.is_sequential
    assert plan == fresh and plan.document() == fresh.document()
    assert plan.computed_digest() == plan.plan_digest
    parallel = plan.model_copy(
        update={"steps": (steps[0], steps[1].model_copy(update={"after": ("a",)}))}
    )
    assert not parallel.is_sequential and parallel.step("b").after == ("a",)

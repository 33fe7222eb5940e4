"""The limits on what effectusd accepts (docs/design.md section 3), and errors that never show a
value.

Each limit is enforced where the value first arrives (check, submit) and, for what is only
known later (a result rendered into the next step's path or fencing resource), when the step
is enqueued: there it fails that step, with a reason that names the limit, never the value.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from effectusd.core.canonical import (
    MAX_FACTS_BYTES,
    MAX_FENCING_RESOURCE_CHARS,
    MAX_JSON_DEPTH,
    MAX_PATH_CHARS,
    MAX_PLAN_BYTES,
    canonical_bytes,
    json_problems,
    parse_json,
)
from effectusd.core.checker import PlanCheckError, check
from effectusd.core.contracts import VerbContract
from effectusd.core.engine import Completion, DispatchFacts, SagaFacts, StepFacts, settle
from effectusd.core.enqueue import SagaRef, build_dispatch
from effectusd.core.expressions import ResolutionError
from effectusd.core.plan import CheckedPlan
from effectusd.core.registry import Registry
from effectusd.core.states import (
    Delivery,
    Direction,
    DispatchState,
    OutcomeClass,
    SagaState,
    StepState,
)
from effectusd.core.submission import SubmitError, ensure_checked, prepare_submission
from effectusd.core.transition import HeldClaim

SECRET = "SECRET-4111-1111"
SAGA = SagaRef("saga-1", "default", "order-7")


def nested(depth: int, leaf: Any = 1) -> Any:
    """``depth`` objects nested in one another around ``leaf`` (built without recursion)."""
    value = leaf
    for _ in range(depth):
        value = {"k": value}
    return value


def text_nested(depth: int) -> str:
    return '{"k":' * depth + "1" + "}" * depth


VERBS = {
    verb.name: verb
    for verb in (
        VerbContract(name="open", destination="bank", path="/accounts"),
        VerbContract(
            name="lock",
            destination="bank",
            path="/locks",
            fencing=("account:{args.account_id}",),
        ),
        VerbContract(name="fetch", destination="bank", path="/accounts/{args.account_id}"),
        VerbContract(
            name="pay",
            destination="bank",
            path="/payments",
            args_schema={
                "type": "object",
                "properties": {
                    "amount": {"type": "integer", "minimum": 1},
                    "currency": {"enum": ["EUR", "USD"]},
                    "memo": {"type": "string", "maxLength": 4, "pattern": "^[a-z]*$"},
                },
            },
        ),
    )
}
REGISTRY = Registry(VERBS)


def plan_of(*steps: tuple[str, dict[str, Any]], facts: dict[str, str] | None = None) -> Any:
    return {
        "plan_id": "limits",
        "facts": facts or {},
        "steps": [
            {"id": f"s{i}", "verb": verb, "args": args, "compensate": "none"}
            for i, (verb, args) in enumerate(steps, start=1)
        ],
    }


def submit(plan: Any, facts: dict[str, Any]) -> None:
    checked = ensure_checked(plan, REGISTRY)
    prepare_submission(checked, REGISTRY, "default", "order-7", facts)


# --- nesting -----------------------------------------------------------------------------------


def test_a_value_nested_to_the_limit_is_accepted_one_level_more_is_refused() -> None:
    assert json_problems(nested(MAX_JSON_DEPTH - 1, []), "$") == []

    [problem] = json_problems(nested(MAX_JSON_DEPTH, []), "$")

    assert problem.startswith("$.k.k.k")
    assert problem.endswith(f"nests deeper than {MAX_JSON_DEPTH} levels of arrays and objects")


def test_a_100000_level_value_is_refused_by_path_without_exhausting_the_stack() -> None:
    [problem] = json_problems({"order": nested(100_000)}, "facts")

    path, _, reason = problem.rpartition(": ")
    assert path.startswith("facts.order.k.k")
    assert len(path) <= 120  # the path is cut, not 64 levels spelled out
    assert str(MAX_JSON_DEPTH) in reason


@pytest.mark.parametrize("depth", [980, 100_000])
def test_parse_json_refuses_a_deep_text_with_a_value_error_never_a_recursion_error(
    depth: int,
) -> None:
    with pytest.raises(ValueError, match=f"deeper than {MAX_JSON_DEPTH} levels"):
        parse_json(text_nested(depth), MAX_JSON_DEPTH)
    with pytest.raises(ValueError, match="nests too deeply"):
        parse_json(text_nested(100_000))  # no limit asked: still never a RecursionError


def test_parse_json_counts_nesting_outside_strings_only() -> None:
    within = '{"k":"' + "[{" * 500 + '\\"' + '"}'

    assert parse_json(within, MAX_JSON_DEPTH) == {"k": "[{" * 500 + '"'}


@pytest.mark.parametrize("depth", [980, 100_000])
def test_check_refuses_deeply_nested_literal_arguments_naming_where(depth: int) -> None:
    plan = plan_of(("open", {"note": nested(depth)}))

    with pytest.raises(PlanCheckError) as refused:
        check(plan, VERBS)

    [issue] = refused.value.issues
    assert issue.path.startswith("steps[0].args.note.k.k")
    assert f"deeper than {MAX_JSON_DEPTH} levels" in issue.message


@pytest.mark.parametrize("depth", [980, 100_000])
def test_submit_refuses_a_deeply_nested_fact_naming_where(depth: int) -> None:
    plan = plan_of(("open", {"order": {"$fact": "order"}}), facts={"order": "object"})

    with pytest.raises(PlanCheckError) as refused:
        submit(plan, {"order": {"items": [nested(depth)]}})

    [issue] = refused.value.issues
    assert issue.path.startswith("facts.order.items[0].k.k")
    assert f"deeper than {MAX_JSON_DEPTH} levels" in issue.message


def test_submit_refuses_a_fact_that_nests_too_deeply_once_substituted_into_a_later_step() -> None:
    # Alone the fact is within the limit; inside the second step's arguments it is not.
    plan = plan_of(
        ("open", {}),
        ("open", {"a": {"b": {"c": {"$fact": "doc"}}}}),
        facts={"doc": "object"},
    )

    with pytest.raises(SubmitError) as refused:
        submit(plan, {"doc": nested(MAX_JSON_DEPTH - 2)})

    message = str(refused.value)
    assert message.startswith("step 's2' (forward): args.a.b.c.k")
    assert f"deeper than {MAX_JSON_DEPTH} levels" in message


def test_a_deeply_nested_checked_plan_is_refused_as_a_check_error() -> None:
    document = check(plan_of(("open", {"note": 1})), VERBS).document()
    document["steps"][0]["args"]["note"] = nested(100_000)

    with pytest.raises(PlanCheckError, match=f"deeper than {MAX_JSON_DEPTH} levels"):
        ensure_checked(document, REGISTRY)


# --- sizes -------------------------------------------------------------------------------------


def test_a_plan_over_the_size_limit_is_refused_at_check() -> None:
    plan = plan_of(("open", {"note": "x" * MAX_PLAN_BYTES}))

    with pytest.raises(PlanCheckError) as refused:
        check(plan, VERBS)

    assert f"over the limit of {MAX_PLAN_BYTES}" in str(refused.value)


def test_facts_over_the_size_limit_are_refused_at_submit_and_just_under_are_accepted() -> None:
    plan = plan_of(("open", {"order": {"$fact": "order"}}), facts={"order": "string"})
    overhead = len(canonical_bytes({"order": ""}))

    submit(plan, {"order": "x" * (MAX_FACTS_BYTES - overhead)})
    with pytest.raises(PlanCheckError) as refused:
        submit(plan, {"order": "x" * (MAX_FACTS_BYTES - overhead + 1)})

    assert f"facts: {MAX_FACTS_BYTES + 1} bytes of canonical JSON" in str(refused.value)


# --- rendered fencing resources and paths ---------------------------------------------------------


def test_a_literal_argument_too_long_for_a_fencing_resource_is_refused_at_check() -> None:
    plan = plan_of(("lock", {"account_id": "a" * MAX_FENCING_RESOURCE_CHARS}))

    with pytest.raises(PlanCheckError) as refused:
        check(plan, VERBS)

    [issue] = refused.value.issues
    assert issue.path == "steps[0].args"
    assert "'account:{args.account_id}'" in issue.message
    assert f"over the limit of {MAX_FENCING_RESOURCE_CHARS}" in issue.message


@pytest.mark.parametrize(
    ("verb", "limit"), [("lock", MAX_FENCING_RESOURCE_CHARS), ("fetch", MAX_PATH_CHARS)]
)
@pytest.mark.parametrize("position", ["first-step", "later-step"])
def test_a_fact_rendering_too_long_a_resource_or_path_is_refused_at_submit(
    verb: str, limit: int, position: str
) -> None:
    steps: list[tuple[str, dict[str, Any]]] = [(verb, {"account_id": {"$fact": "account"}})]
    if position == "later-step":
        steps.insert(0, ("open", {}))
    plan = plan_of(*steps, facts={"account": "string"})
    value = SECRET + "x" * 6000

    with pytest.raises(SubmitError) as refused:
        submit(plan, {"account": value})

    message = str(refused.value)
    assert f"over the limit of {limit}" in message
    assert SECRET not in message
    submit(plan, {"account": "a" * 10})  # a usable value passes


@pytest.mark.parametrize(
    ("verb", "limit"), [("lock", MAX_FENCING_RESOURCE_CHARS), ("fetch", MAX_PATH_CHARS)]
)
def test_a_result_rendering_too_long_a_resource_or_path_fails_the_next_step(
    verb: str, limit: int
) -> None:
    plan = plan_of(("open", {}), (verb, {"account_id": {"$result": "s1", "path": "/id"}}))
    checked = ensure_checked(plan, REGISTRY)
    result = {"id": SECRET + "x" * 6000}

    with pytest.raises(ResolutionError) as refused:
        build_dispatch(SAGA, checked.step("s2"), Direction.FORWARD, REGISTRY, {}, {"s1": result})
    assert f"over the limit of {limit}" in str(refused.value)
    assert SECRET not in str(refused.value)

    transition = success_of_first_step(checked, result)
    assert transition.saga is not None
    assert transition.saga.state is SagaState.FAILED
    assert transition.saga.stop_reason is not None
    assert f"over the limit of {limit}" in transition.saga.stop_reason
    assert SECRET not in transition.saga.stop_reason
    assert [(s.effect_id, s.state) for s in transition.steps] == [("s2", StepState.FAILED)]
    assert transition.new_dispatches == []


def success_of_first_step(checked: CheckedPlan, result: Any) -> Any:
    saga = SagaFacts(
        saga_id=SAGA.saga_id,
        namespace=SAGA.namespace,
        execution_id=SAGA.execution_id,
        state=SagaState.RUNNING,
        cancel_requested=False,
        plan=checked,
        facts={},
        steps={
            step.id: StepFacts(
                step.id,
                step.sequence,
                StepState.IN_PROGRESS if step.sequence == 0 else StepState.PENDING,
            )
            for step in checked.steps
        },
    )
    dispatch = DispatchFacts(
        dispatch_id=1,
        effect_id="s1",
        direction=Direction.FORWARD,
        delivery=Delivery.AT_MOST_ONCE,
        verb="open",
        state=DispatchState.IN_FLIGHT,
        attempt=1,
        max_attempts=5,
        uncertain_attempt=None,
    )
    completion = Completion.answered(HeldClaim(1, 1, "t"), OutcomeClass.SUCCESS, result=result)
    return settle(completion, dispatch, saga, REGISTRY, jitter=0.0)


# --- values never appear in errors ---------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        {"amount": SECRET},
        {"amount": -4111},
        {"currency": SECRET},
        {"memo": SECRET},
    ],
    ids=["type", "minimum", "enum", "max-length-and-pattern"],
)
def test_schema_violations_of_literal_arguments_name_the_argument_not_its_value(
    args: dict[str, Any],
) -> None:
    with pytest.raises(PlanCheckError) as refused:
        check(plan_of(("pay", args)), VERBS)

    message = str(refused.value)
    assert f"steps[0].args.{next(iter(args))}: schema:" in message
    assert SECRET not in message and "4111" not in message


def test_schema_reasons_say_what_the_schema_asks_for() -> None:
    with pytest.raises(PlanCheckError) as refused:
        check(plan_of(("pay", {"amount": "x", "currency": "GBP"})), VERBS)

    assert {str(issue) for issue in refused.value.issues} == {
        "steps[0].args.amount: schema: must be of type integer",
        'steps[0].args.currency: schema: fails enum ["EUR", "USD"]',
    }


def test_a_literal_path_segment_is_refused_naming_the_argument_not_its_value() -> None:
    with pytest.raises(PlanCheckError) as refused:
        check(plan_of(("fetch", {"account_id": f"{SECRET}/42"})), VERBS)

    message = str(refused.value)
    assert "steps[0].args.account_id: " in message and "path segment" in message
    assert SECRET not in message


@pytest.mark.parametrize(
    ("verb", "args", "facts", "value"),
    [
        ("fetch", {"account_id": {"$fact": "v"}}, {"v": "string"}, f"{SECRET}/42"),
        ("pay", {"amount": {"$fact": "v"}}, {"v": "string"}, SECRET),
        ("pay", {"memo": {"$fact": "v"}}, {"v": "string"}, SECRET),
        ("lock", {"account_id": {"$fact": "v"}}, {"v": "object"}, {"card": SECRET}),
    ],
    ids=["path-segment", "schema-type", "schema-pattern", "template-type"],
)
def test_submit_errors_name_the_fact_or_argument_never_its_value(
    verb: str, args: dict[str, Any], facts: dict[str, str], value: Any
) -> None:
    plan = plan_of(("open", {}), (verb, args), facts=facts)
    for reordered in (plan, {**plan, "steps": plan["steps"][::-1]}):  # first step and later
        with pytest.raises(SubmitError) as refused:
            submit(reordered, {"v": value})
        assert SECRET not in str(refused.value)


@pytest.mark.parametrize(
    ("verb", "args", "result"),
    [
        ("fetch", {"account_id": {"$result": "s1", "path": "/v"}}, {"v": "RESULT-SECRET/42"}),
        ("pay", {"amount": {"$result": "s1", "path": "/v"}}, {"v": "RESULT-SECRET"}),
        ("pay", {"memo": {"$result": "s1", "path": "/v"}}, {"v": "RESULT-SECRET"}),
        ("lock", {"account_id": {"$result": "s1"}}, {"v": "RESULT-SECRET"}),
    ],
    ids=["path-segment", "schema-type", "schema-pattern", "template-type"],
)
def test_results_that_fail_the_next_step_never_appear_in_its_stop_reason(
    verb: str, args: dict[str, Any], result: Any
) -> None:
    checked = ensure_checked(plan_of(("open", {}), (verb, args)), REGISTRY)

    transition = success_of_first_step(checked, result)

    assert transition.saga is not None and transition.saga.state is SagaState.FAILED
    assert transition.saga.stop_reason is not None
    assert "step 's2' could not be dispatched" in transition.saga.stop_reason
    assert "SECRET" not in transition.saga.stop_reason
    # s2 has no dispatch to say it failed: its row keeps it (effectusd.core.steps)
    assert [(u.effect_id, u.state) for u in transition.steps] == [("s2", "failed")]


def test_a_malformed_checked_plan_is_refused_by_path_never_quoting_its_content() -> None:
    document = copy.deepcopy(check(plan_of(("open", {"note": 1})), VERBS).document())
    document["steps"][0]["sequence"] = SECRET

    with pytest.raises(PlanCheckError) as refused:
        ensure_checked(document, REGISTRY)

    message = str(refused.value)
    assert "steps[0].sequence: not a checked plan" in message
    assert SECRET not in message

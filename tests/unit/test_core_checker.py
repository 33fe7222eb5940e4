"""check(plan, verbs) and verify_checked (docs/design.md section 4)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from effectusd.core.canonical import canonical_hash
from effectusd.core.checker import CheckIssue, PlanCheckError, check, verify_checked
from effectusd.core.contracts import VerbContract
from effectusd.core.plan import CHECKED_PLAN_FORMAT, CheckedPlan, PlanSpec

Plan = dict[str, Any]


def _issues(plan: Any, verbs: dict[str, VerbContract]) -> list[CheckIssue]:
    with pytest.raises(PlanCheckError) as excinfo:
        check(plan, verbs)
    for issue in excinfo.value.issues:
        assert str(issue) in str(excinfo.value)
    return excinfo.value.issues


def _has(issues: list[CheckIssue], path: str, fragment: str) -> bool:
    return any(issue.path == path and fragment in issue.message for issue in issues)


def _set(*keys: Any, value: Any) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        target = plan
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value

    return mutate


def _delete(*keys: Any) -> Callable[[Plan], None]:
    def mutate(plan: Plan) -> None:
        target = plan
        for key in keys[:-1]:
            target = target[key]
        del target[keys[-1]]

    return mutate


def _reordered(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _reordered(value[key]) for key in reversed(list(value))}
    if isinstance(value, list):
        return [_reordered(item) for item in value]
    return value


# --- a valid plan ------------------------------------------------------------------------------


def test_valid_plan_checks_and_its_digest_is_the_computed_digest(
    checkout_plan: Plan, core_verbs: dict[str, VerbContract]
) -> None:
    checked = check(checkout_plan, core_verbs)
    assert checked.format == CHECKED_PLAN_FORMAT
    assert checked.plan_digest == checked.computed_digest()
    assert checked.plan_digest == canonical_hash(checked.body())
    assert "plan_digest" not in checked.body()
    assert verify_checked(checked, core_verbs) == []


def test_checked_plan_inlines_live_contract_hashes_and_sequences(
    checkout_plan: Plan, core_verbs: dict[str, VerbContract]
) -> None:
    checked = check(checkout_plan, core_verbs)
    assert [step.id for step in checked.steps] == ["charge", "ship"]
    assert [step.sequence for step in checked.steps] == [0, 1]
    assert checked.steps[0].contract_hash == core_verbs["charge"].contract_hash
    assert checked.steps[1].contract_hash == core_verbs["ship"].contract_hash
    compensation = checked.steps[0].compensate
    assert compensation is not None
    assert compensation.contract_hash == core_verbs["refund"].contract_hash
    assert checked.steps[1].compensate is None
    assert checked.steps[0].args == checkout_plan["steps"][0]["args"]


def test_plan_digest_ignores_key_order_of_the_plan(
    checkout_plan: Plan, core_verbs: dict[str, VerbContract]
) -> None:
    assert (
        check(_reordered(checkout_plan), core_verbs).plan_digest
        == check(checkout_plan, core_verbs).plan_digest
    )


def test_plan_spec_object_and_plain_dict_give_the_same_digest(
    checkout_plan: Plan, core_verbs: dict[str, VerbContract]
) -> None:
    spec = PlanSpec.model_validate(checkout_plan)
    assert check(spec, core_verbs).plan_digest == check(checkout_plan, core_verbs).plan_digest


@pytest.mark.parametrize(
    "mutate",
    [
        _set("plan_id", value="checkout2"),
        _set("facts", "coupon", value="string"),
        _set("steps", 1, "args", "lines", 0, "qty", value=3),
        _set("steps", 1, "id", value="dispatch"),
        _set("steps", 1, "compensate", value={"verb": "notify", "args": {}}),
        _set("steps", 0, "compensate", "args", "charge_id", "path", value="/id"),
    ],
)
def test_plan_digest_changes_when_the_plan_changes(
    checkout_plan: Plan, core_verbs: dict[str, VerbContract], mutate: Callable[[Plan], None]
) -> None:
    before = check(checkout_plan, core_verbs).plan_digest
    mutate(checkout_plan)
    assert check(checkout_plan, core_verbs).plan_digest != before


def test_plan_digest_changes_when_a_contract_changes(
    checkout_plan: Plan, core_verbs: dict[str, VerbContract]
) -> None:
    before = check(checkout_plan, core_verbs).plan_digest
    core_verbs["ship"] = VerbContract(name="ship", destination="warehouse-2", path="/shipments")
    assert check(checkout_plan, core_verbs).plan_digest != before


def test_compensation_may_refer_to_its_own_steps_result(
    checkout_plan: Plan, core_verbs: dict[str, VerbContract]
) -> None:
    assert checkout_plan["steps"][0]["compensate"]["args"]["charge_id"]["$result"] == "charge"
    checked = check(checkout_plan, core_verbs)
    assert checked.steps[0].compensate is not None


def test_explicit_none_compensation_is_accepted(
    checkout_plan: Plan, core_verbs: dict[str, VerbContract]
) -> None:
    checkout_plan["steps"][0]["compensate"] = "none"
    assert check(checkout_plan, core_verbs).steps[0].compensate is None


# --- every bad input, named by path ------------------------------------------------------------

BAD_INPUTS: list[tuple[str, Callable[[Plan], None], str, str]] = [
    ("steps_not_a_list", _set("steps", value="charge"), "steps", "list"),
    ("steps_empty", _set("steps", value=[]), "steps", "at least one step"),
    ("plan_id_missing", _delete("plan_id"), "plan_id", "missing"),
    ("step_verb_missing", _delete("steps", 1, "verb"), "steps[1].verb", "missing"),
    ("step_extra_key", _set("steps", 1, "retries", value=3), "steps[1].retries", "Extra"),
    ("fact_type_unknown", _set("facts", "order", value="str"), "facts.order", "'string'"),
    ("plan_extra_key", _set("version", value=2), "version", "Extra"),
    (
        "compensate_missing",
        _delete("steps", 1, "compensate"),
        "steps[1].compensate",
        '"none" when nothing needs undoing',
    ),
    (
        "compensate_misspelt_none",
        _set("steps", 1, "compensate", value="nothing"),
        "steps[1].compensate",
        "'none'",
    ),
    (
        "compensate_verb_missing",
        _delete("steps", 0, "compensate", "verb"),
        "steps[0].compensate.verb",
        "missing",
    ),
    (
        "unknown_verb",
        _set("steps", 1, "verb", value="teleport"),
        "steps[1].verb",
        "unknown verb 'teleport'",
    ),
    (
        "unknown_compensation_verb",
        _set("steps", 0, "compensate", "verb", value="unship"),
        "steps[0].compensate.verb",
        "unknown verb 'unship'",
    ),
    (
        "duplicate_step_id",
        _set("steps", 1, "id", value="charge"),
        "steps[1].id",
        "duplicate step id 'charge'",
    ),
    ("step_id_leading_digit", _set("steps", 1, "id", value="1ship"), "steps[1].id", "'1ship'"),
    ("step_id_space", _set("steps", 1, "id", value="sh ip"), "steps[1].id", "'sh ip'"),
    ("step_id_empty", _set("steps", 1, "id", value=""), "steps[1].id", "''"),
    ("step_id_too_long", _set("steps", 1, "id", value="s" * 129), "steps[1].id", "128"),
    ("plan_id_malformed", _set("plan_id", value="check out"), "plan_id", "must start"),
    ("fact_name_malformed", _set("facts", "a b", value="string"), 'facts["a b"]', "identifier"),
    (
        "result_of_later_step",
        _set("steps", 0, "args", "note", value={"$result": "ship", "path": "/id"}),
        "steps[0].args.note",
        "does not run before",
    ),
    (
        "result_of_own_step_in_forward_args",
        _set("steps", 0, "args", "note", value={"$result": "charge"}),
        "steps[0].args.note",
        "does not run before",
    ),
    (
        "compensation_result_of_later_step",
        _set("steps", 0, "compensate", "args", "x", value={"$result": "ship"}),
        "steps[0].compensate.args.x",
        "does not run before",
    ),
    (
        "result_of_missing_step",
        _set("steps", 1, "args", "ref", value=[{"$result": "ghost", "path": "/id"}]),
        "steps[1].args.ref[0]",
        "missing step 'ghost'",
    ),
    (
        "undeclared_fact",
        _set("steps", 1, "args", "coupon", value={"$fact": "coupon"}),
        "steps[1].args.coupon",
        "fact 'coupon' is not declared",
    ),
    (
        "undeclared_fact_in_compensation",
        _set("steps", 0, "compensate", "args", "why", value={"$fact": "reason"}),
        "steps[0].compensate.args.why",
        "fact 'reason' is not declared",
    ),
    (
        "malformed_expression",
        _set("steps", 1, "args", "bad", value={"$fact": "order", "$literal": 1}),
        "steps[1].args.bad",
        "exactly one",
    ),
    ("nan_in_args", _set("steps", 1, "args", "w", value=float("nan")), "steps[1].args.w", "NaN"),
    (
        "infinity_in_args",
        _set("steps", 1, "args", "lines", 0, "qty", value=float("inf")),
        "steps[1].args.lines[0].qty",
        "Infinity",
    ),
    ("big_int_in_args", _set("steps", 1, "args", "n", value=2**60), "steps[1].args.n", "2^53"),
    (
        "non_string_key_in_args",
        _set("steps", 1, "args", "lines", 0, value={1: "x"}),
        "steps[1].args.lines[0]",
        "not a string",
    ),
    (
        "lone_surrogate_in_args",
        _set("steps", 1, "args", "s", value="a\udc80"),
        "steps[1].args.s",
        "surrogate",
    ),
    (
        "schema_enum_violation",
        _set("steps", 0, "args", "currency", value="GBP"),
        "steps[0].args.currency",
        "schema",
    ),
    (
        "schema_minimum_violation",
        _set("steps", 0, "args", "amount", value=0),
        "steps[0].args.amount",
        "schema",
    ),
    (
        "schema_violation_in_all_literal_compensation",
        _set("steps", 0, "compensate", "args", "charge_id", value=17),
        "steps[0].compensate.args.charge_id",
        "schema",
    ),
    (
        "schema_required_in_all_literal_compensation",
        _set("steps", 0, "compensate", "args", value={}),
        "steps[0].compensate.args",
        "'charge_id' is a required property",
    ),
    (
        "argument_for_path_template_missing",
        _set("steps", 1, value={"id": "hold", "verb": "hold", "args": {}, "compensate": "none"}),
        "steps[1].args",
        "needs argument 'sku' for template '/holds/{args.sku}'",
    ),
    (
        "fact_for_fencing_template_undeclared",
        _set(
            "steps",
            1,
            value={"id": "hold", "verb": "hold", "args": {"sku": "A"}, "compensate": "none"},
        ),
        "steps[1].args",
        "needs fact 'region'",
    ),
]


@pytest.mark.parametrize(
    ("mutate", "path", "fragment"),
    [pytest.param(mutate, path, fragment, id=name) for name, mutate, path, fragment in BAD_INPUTS],
)
def test_bad_plan_is_refused_naming_the_problem_by_path(
    checkout_plan: Plan,
    core_verbs: dict[str, VerbContract],
    mutate: Callable[[Plan], None],
    path: str,
    fragment: str,
) -> None:
    mutate(checkout_plan)
    issues = _issues(checkout_plan, core_verbs)
    assert _has(issues, path, fragment), [str(issue) for issue in issues]


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (_set("steps", 1, "id", value="ship\n"), "steps[1].id"),
        (_set("plan_id", value="checkout\n"), "plan_id"),
    ],
    ids=["step_id", "plan_id"],
)
def test_identifier_with_trailing_newline_is_refused(
    checkout_plan: Plan,
    core_verbs: dict[str, VerbContract],
    mutate: Callable[[Plan], None],
    path: str,
) -> None:
    mutate(checkout_plan)
    assert path in {issue.path for issue in _issues(checkout_plan, core_verbs)}


@pytest.mark.parametrize("plan", [[1], "plan", None], ids=["list", "str", "none"])
def test_a_plan_that_is_not_an_object_is_refused(
    plan: Any, core_verbs: dict[str, VerbContract]
) -> None:
    assert _issues(plan, core_verbs)


def test_argument_for_fencing_template_missing_is_reported(
    core_verbs: dict[str, VerbContract],
) -> None:
    core_verbs["lock"] = VerbContract(name="lock", destination="d", fencing=("acct:{args.acct}",))
    plan = {
        "plan_id": "p",
        "steps": [{"id": "s", "verb": "lock", "args": {"other": 1}, "compensate": "none"}],
    }
    assert _has(_issues(plan, core_verbs), "steps[0].args", "needs argument 'acct'")


def test_several_problems_are_all_reported_in_one_error(
    checkout_plan: Plan, core_verbs: dict[str, VerbContract]
) -> None:
    checkout_plan["plan_id"] = "bad plan"
    checkout_plan["steps"][0]["args"]["currency"] = "GBP"
    checkout_plan["steps"][0]["args"]["note"] = {"$result": "ship"}
    checkout_plan["steps"][1]["id"] = "charge"
    checkout_plan["steps"][1]["verb"] = "teleport"
    checkout_plan["steps"][1]["args"]["coupon"] = {"$fact": "coupon"}
    checkout_plan["steps"][1]["args"]["nan"] = float("nan")
    checkout_plan["steps"].append(
        {"id": "9x", "verb": "notify", "args": {"big": 2**60}, "compensate": "none"}
    )
    issues = _issues(checkout_plan, core_verbs)
    expected = {
        "plan_id",
        "steps[0].args.currency",
        "steps[0].args.note",
        "steps[1].id",
        "steps[1].verb",
        "steps[1].args.coupon",
        "steps[1].args.nan",
        "steps[2].id",
        "steps[2].args.big",
    }
    assert expected <= {issue.path for issue in issues}


def test_several_structural_problems_are_all_reported(
    checkout_plan: Plan, core_verbs: dict[str, VerbContract]
) -> None:
    del checkout_plan["plan_id"]
    del checkout_plan["steps"][0]["verb"]
    del checkout_plan["steps"][1]["compensate"]
    checkout_plan["steps"][1]["args"]["x"] = float("nan")
    paths = {issue.path for issue in _issues(checkout_plan, core_verbs)}
    assert {"plan_id", "steps[0].verb", "steps[1].compensate", "steps[1].args.x"} <= paths


def test_structural_and_semantic_problems_are_reported_together(
    checkout_plan: Plan, core_verbs: dict[str, VerbContract]
) -> None:
    del checkout_plan["steps"][1]["compensate"]
    checkout_plan["steps"][0]["verb"] = "teleport"
    paths = {issue.path for issue in _issues(checkout_plan, core_verbs)}
    assert {"steps[1].compensate", "steps[0].verb"} <= paths


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (float("nan"), "NaN"),
        (float("inf"), "Infinity"),
        ({1, 2}, "set"),
        (b"raw", "bytes"),
        ({1: "x"}, "not a string"),
    ],
    ids=["nan", "inf", "set", "bytes", "int_key"],
)
def test_plan_spec_object_with_non_json_args_is_refused_not_coerced(
    checkout_plan: Plan, core_verbs: dict[str, VerbContract], value: Any, fragment: str
) -> None:
    spec = PlanSpec.model_validate(checkout_plan)
    spec.steps[1].args["bad"] = value
    issues = _issues(spec, core_verbs)
    assert _has(issues, "steps[1].args.bad", fragment) or _has(issues, "steps[1].args", fragment)


def test_literal_escape_is_unwrapped_before_schema_validation(
    checkout_plan: Plan, core_verbs: dict[str, VerbContract]
) -> None:
    checkout_plan["steps"][0]["args"]["currency"] = {"$literal": "EUR"}
    check(checkout_plan, core_verbs)


def test_missing_required_argument_is_reported_even_when_other_arguments_are_references(
    checkout_plan: Plan, core_verbs: dict[str, VerbContract]
) -> None:
    del checkout_plan["steps"][0]["args"]["currency"]
    assert _has(_issues(checkout_plan, core_verbs), "steps[0].args", "currency")


def test_invalid_contract_schema_is_refused_when_the_verb_is_loaded() -> None:
    with pytest.raises(ValueError, match="not a valid JSON Schema"):
        VerbContract(name="notify", destination="mailer", args_schema={"type": "strng"})


# --- verify_checked ----------------------------------------------------------------------------


@pytest.fixture
def checked(checkout_plan: Plan, core_verbs: dict[str, VerbContract]) -> CheckedPlan:
    return check(checkout_plan, core_verbs)


def test_verify_detects_an_edited_digest(
    checked: CheckedPlan, core_verbs: dict[str, VerbContract]
) -> None:
    edited = checked.model_copy(update={"plan_digest": "0" * 64})
    assert [issue.path for issue in verify_checked(edited, core_verbs)] == ["plan_digest"]


def test_verify_detects_an_edited_step_through_the_digest(
    checked: CheckedPlan, core_verbs: dict[str, VerbContract]
) -> None:
    document = checked.document()
    document["steps"][1]["args"]["lines"][0]["qty"] = 200
    edited = CheckedPlan.model_validate(document)
    assert [issue.path for issue in verify_checked(edited, core_verbs)] == ["plan_digest"]


def test_verify_detects_a_drifted_contract(
    checked: CheckedPlan, core_verbs: dict[str, VerbContract]
) -> None:
    core_verbs["ship"] = VerbContract(
        name="ship", destination="warehouse", path="/shipments", delivery="at_most_once"
    )
    issues = verify_checked(checked, core_verbs)
    assert [issue.path for issue in issues] == ["steps[1].contract_hash"]
    assert "drift" in issues[0].message


def test_verify_detects_a_drifted_compensation_contract(
    checked: CheckedPlan, core_verbs: dict[str, VerbContract]
) -> None:
    core_verbs["refund"] = core_verbs["refund"].model_copy(update={"version": 2})
    issues = verify_checked(checked, core_verbs)
    assert [issue.path for issue in issues] == ["steps[0].compensate.contract_hash"]


def test_verify_detects_a_verb_missing_from_the_live_registry(
    checked: CheckedPlan, core_verbs: dict[str, VerbContract]
) -> None:
    del core_verbs["charge"]
    issues = verify_checked(checked, core_verbs)
    assert [issue.path for issue in issues] == ["steps[0].contract_hash"]
    assert "'charge'" in issues[0].message


def test_verify_accepts_a_document_round_trip(
    checked: CheckedPlan, core_verbs: dict[str, VerbContract]
) -> None:
    reloaded = CheckedPlan.model_validate(copy.deepcopy(checked.document()))
    assert reloaded == checked
    assert verify_checked(reloaded, core_verbs) == []


@pytest.mark.parametrize(
    ("break_it", "other_path", "other_message"),
    [
        (_set("steps", 1, "args", value=5), "steps[1].args", "valid dictionary"),
        (_delete("steps", 1, "compensate"), "steps[1].compensate", "missing"),
        (_set("steps", 1, "verb", value="unship"), "steps[1].verb", "unknown verb"),
    ],
)
def test_a_duplicate_step_id_is_reported_with_that_steps_other_problems(
    checkout_plan: Plan,
    core_verbs: dict[str, VerbContract],
    break_it: Callable[[Plan], None],
    other_path: str,
    other_message: str,
) -> None:
    checkout_plan["steps"][1]["id"] = "charge"
    break_it(checkout_plan)
    issues = _issues(checkout_plan, core_verbs)
    assert _has(issues, "steps[1].id", "duplicate step id 'charge' (first at steps[0])")
    assert _has(issues, other_path, other_message)


def test_an_id_repeated_by_a_malformed_first_step_is_reported_once(
    checkout_plan: Plan, core_verbs: dict[str, VerbContract]
) -> None:
    checkout_plan["steps"][0]["args"] = []
    checkout_plan["steps"][1]["id"] = "charge"
    issues = _issues(checkout_plan, core_verbs)
    duplicates = [issue for issue in issues if "duplicate step id" in issue.message]
    assert [str(issue) for issue in duplicates] == [
        "steps[1].id: duplicate step id 'charge' (first at steps[0])"
    ]

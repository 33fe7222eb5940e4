"""Plans in Python (effectusd.core.plan_builder): the builder's plan is the JSON form, checked
by the same check(), with the same digest and the same issue paths (docs/design.md section 4)."""

from __future__ import annotations

import datetime
import enum
import json
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel

from effectusd import (
    Plan,
    PlanCheckError,
    check,
    compensate,
    fact,
    literal,
    no_compensation,
    result,
    step,
)
from effectusd.config import load_config
from effectusd.core.contracts import VerbContract
from effectusd.core.document_checks import fact_issues
from effectusd.core.expressions import resolve
from effectusd.core.fact_types import fact_type
from effectusd.core.plan import FactType
from effectusd.core.registry import Registry
from effectusd.core.submission import ensure_checked

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def example_verbs() -> dict[str, VerbContract]:
    return dict(load_config(ROOT / "examples" / "effectusd.toml").verbs)


def example_plan() -> dict[str, Any]:
    return json.loads((ROOT / "examples" / "checkout.json").read_text(encoding="utf-8"))


class CheckoutFacts(BaseModel):
    order: str
    account_id: str
    amount: int
    currency: str


def python_checkout(facts: Any) -> Plan:
    """examples/checkout.json, written in Python."""
    return Plan(
        "checkout",
        facts=facts,
        steps=[
            step(
                "reserve",
                "inventory.reserve",
                {"order": fact("order"), "sku": "book-42", "quantity": 1},
                compensate=compensate(
                    "inventory.release", {"reservation_id": result("reserve", "/reservation_id")}
                ),
            ),
            step(
                "charge",
                "payments.charge",
                {
                    "order": fact("order"),
                    "account_id": fact("account_id"),
                    "amount": fact("amount"),
                    "currency": fact("currency"),
                },
                compensate=compensate(
                    "payments.refund",
                    {"account_id": fact("account_id"), "charge_id": result("charge", "/charge_id")},
                ),
            ),
            step(
                "ship",
                "shipping.schedule",
                {"order": fact("order"), "reservation_id": result("reserve", "/reservation_id")},
                compensate=no_compensation,
            ),
        ],
    )


# --- the same plan as the JSON form --------------------------------------------------------------


@pytest.mark.parametrize(
    "facts",
    [
        {"order": str, "account_id": str, "amount": int, "currency": str},
        CheckoutFacts,
        {
            "order": FactType.STRING,
            "account_id": FactType.STRING,
            "amount": FactType.INTEGER,
            "currency": FactType.STRING,
        },
    ],
    ids=["python-types", "pydantic-model", "fact-types"],
)
def test_the_checkout_plan_in_python_is_the_example_json_with_the_same_digest(
    facts: Any, example_verbs: dict[str, VerbContract]
) -> None:
    plan = python_checkout(facts)

    assert plan.to_json() == example_plan()
    assert plan == example_plan()  # a Plan reads as its JSON form
    built = plan.check(Registry(example_verbs))
    assert built == check(example_plan(), example_verbs)
    assert built.plan_digest == check(example_plan(), example_verbs).plan_digest
    assert built.plan_digest == built.computed_digest()


def test_what_takes_a_json_plan_takes_the_builders_plan(
    example_verbs: dict[str, VerbContract],
) -> None:
    plan = python_checkout(CheckoutFacts)
    expected = check(example_plan(), example_verbs)

    assert check(plan, example_verbs) == expected
    assert ensure_checked(plan, Registry(example_verbs)) == expected  # Client.submit's check
    assert plan.check(example_verbs) == expected


def test_compensations_and_no_compensation_are_checked_as_in_the_json_form(
    example_verbs: dict[str, VerbContract],
) -> None:
    plan = python_checkout(CheckoutFacts)
    checked = plan.check(example_verbs)

    assert plan["steps"][2]["compensate"] == "none"
    assert checked.step("ship").compensate is None
    release = checked.step("reserve").compensate
    assert release is not None
    assert release.verb == "inventory.release"
    assert release.contract_hash == example_verbs["inventory.release"].contract_hash
    assert release.args == {"reservation_id": {"$result": "reserve", "path": "/reservation_id"}}


def test_compensate_without_arguments_has_empty_args() -> None:
    plan = Plan("p", steps=[step("a", "v", compensate=compensate("undo"))])

    assert plan["steps"] == [
        {"id": "a", "verb": "v", "args": {}, "compensate": {"verb": "undo", "args": {}}}
    ]


# --- references ----------------------------------------------------------------------------------


def test_every_reference_kind_anywhere_in_the_arguments_resolves_as_the_json_form_does() -> None:
    args = {
        "order": fact("order"),
        "reservation": result("reserve", "/reservation_id"),
        "whole": result("reserve"),
        "escaped": literal({"$fact": "order"}),
        "plain": {"sku": "book-42", "quantity": 1, "gift": None, "price": 9.5, "rush": False},
        "lines": [{"order": fact("order")}, (result("reserve", "/lines/0"), literal([1, 2]))],
    }
    plan = Plan(
        "p", facts={"order": str}, steps=[step("reserve", "v", args, compensate=no_compensation)]
    )
    written = plan["steps"][0]["args"]

    assert written["order"] == {"$fact": "order"}
    assert written["reservation"] == {"$result": "reserve", "path": "/reservation_id"}
    assert written["whole"] == {"$result": "reserve"}  # no path: the whole result
    assert written["escaped"] == {"$literal": {"$fact": "order"}}
    assert written["lines"][1] == [
        {"$result": "reserve", "path": "/lines/0"},
        {"$literal": [1, 2]},
    ]  # a tuple is a JSON array
    reserve = {"reservation_id": "r-9", "lines": ["l-1"]}
    assert resolve(written, {"order": "o-7"}, {"reserve": reserve}) == {
        "order": "o-7",
        "reservation": "r-9",
        "whole": reserve,
        "escaped": {"$fact": "order"},
        "plain": {"sku": "book-42", "quantity": 1, "gift": None, "price": 9.5, "rush": False},
        "lines": [{"order": "o-7"}, ["l-1", [1, 2]]],
    }


def test_a_plain_mapping_that_looks_like_a_reference_reads_as_the_json_form_reads_it() -> None:
    by_hand = Plan(
        "p",
        facts={"order": str},
        steps=[step("a", "v", {"order": {"$fact": "order"}}, compensate=no_compensation)],
    )
    built = Plan(
        "p",
        facts={"order": str},
        steps=[step("a", "v", {"order": fact("order")}, compensate=no_compensation)],
    )

    assert by_hand == built


def test_the_plan_does_not_change_when_what_it_was_built_from_or_read_into_does() -> None:
    args: dict[str, Any] = {"lines": [literal({"sku": "A"})], "order": fact("order")}
    plan = Plan("p", facts={"order": str}, steps=[step("a", "v", args, compensate=no_compensation)])
    before = plan.to_json()

    args["lines"].append("later")
    args["lines"][0].value["sku"] = "B"  # type: ignore[index]
    plan.to_json()["steps"][0]["verb"] = "other"
    plan["steps"][0]["args"]["order"] = "o-1"

    assert plan.to_json() == before
    assert before["steps"][0]["args"] == {
        "lines": [{"$literal": {"sku": "A"}}],
        "order": {"$fact": "order"},
    }


# --- every problem at once, by path --------------------------------------------------------------


def test_a_plan_with_several_problems_reports_all_of_them_at_the_json_forms_paths(
    example_verbs: dict[str, VerbContract],
) -> None:
    plan = Plan(
        "bad plan",
        facts={"order": str},
        steps=[
            step(
                "charge",
                "payments.teleport",
                {"order": fact("ordr"), "ship": result("ship", "/id")},
                compensate=compensate("payments.unrefund", {"when": datetime.date(2024, 1, 1)}),
            ),
            step(
                "charge",
                "shipping.schedule",
                {"order": fact("order"), "n": float("nan"), "x": result("nowhere")},
                compensate=no_compensation,
            ),
        ],
    )
    as_json: dict[str, Any] = {
        "plan_id": "bad plan",
        "facts": {"order": "string"},
        "steps": [
            {
                "id": "charge",
                "verb": "payments.teleport",
                "args": {"order": {"$fact": "ordr"}, "ship": {"$result": "ship", "path": "/id"}},
                "compensate": {
                    "verb": "payments.unrefund",
                    "args": {"when": datetime.date(2024, 1, 1)},
                },
            },
            {
                "id": "charge",
                "verb": "shipping.schedule",
                "args": {
                    "order": {"$fact": "order"},
                    "n": float("nan"),
                    "x": {"$result": "nowhere"},
                },
                "compensate": "none",
            },
        ],
    }

    with pytest.raises(PlanCheckError) as built:
        plan.check(example_verbs)
    with pytest.raises(PlanCheckError) as written:
        check(as_json, example_verbs)

    assert [str(issue) for issue in built.value.issues] == [
        str(issue) for issue in written.value.issues
    ]
    assert {issue.path for issue in built.value.issues} == {
        "plan_id",
        "steps[0].verb",
        "steps[0].args.order",
        "steps[0].args.ship",
        "steps[0].compensate.verb",
        "steps[0].compensate.args.when",
        "steps[1].id",
        "steps[1].args.n",
        "steps[1].args.x",
    }


def test_an_argument_nested_past_the_limit_is_an_issue_as_in_the_json_form() -> None:
    verbs = {"v": VerbContract(name="v", destination="d")}
    deep: Any = "x"
    for _ in range(100_000):
        deep = [deep]
    as_json = {
        "plan_id": "p",
        "facts": {},
        "steps": [
            {"id": "a", "verb": "v", "args": {"x": {"$literal": deep}}, "compensate": "none"}
        ],
    }

    with pytest.raises(PlanCheckError) as built:
        Plan("p", steps=[step("a", "v", {"x": literal(deep)}, compensate=no_compensation)]).check(
            verbs
        )
    with pytest.raises(PlanCheckError) as written:
        check(as_json, verbs)

    assert [str(issue) for issue in built.value.issues] == [
        str(issue) for issue in written.value.issues
    ]
    assert str(built.value).endswith("nests deeper than 64 levels of arrays and objects")


# --- fact types ----------------------------------------------------------------------------------


class Colour(enum.StrEnum):
    RED = "red"


class Address(BaseModel):
    city: str


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (str, FactType.STRING),
        (Colour, FactType.STRING),
        (Literal["EUR", "USD"], FactType.STRING),
        (int, FactType.INTEGER),
        (Literal[1, 2], FactType.INTEGER),
        (float, FactType.NUMBER),
        (bool, FactType.BOOLEAN),
        (Literal[True], FactType.BOOLEAN),
        (dict, FactType.OBJECT),
        (dict[str, int], FactType.OBJECT),
        (Address, FactType.OBJECT),
        (list, FactType.ARRAY),
        (list[str], FactType.ARRAY),
        (tuple[int, ...], FactType.ARRAY),
        (FactType.NUMBER, FactType.NUMBER),
    ],
)
def test_python_types_map_to_the_json_type_their_values_have(
    annotation: Any, expected: FactType
) -> None:
    assert fact_type(annotation) is expected


class OrderFacts(BaseModel):
    order: str
    amount: int
    rate: float
    express: bool
    currency: Literal["EUR", "USD"]
    colour: Colour
    ship_to: Address
    tags: list[str]
    extra: dict[str, int]


def test_fact_types_from_a_pydantic_model_accept_its_instances_at_submit() -> None:
    plan = Plan("p", facts=OrderFacts, steps=[step("a", "v", compensate=no_compensation)])
    instance = OrderFacts(
        order="o-7",
        amount=1250,
        rate=0.5,
        express=True,
        currency="EUR",
        colour=Colour.RED,
        ship_to=Address(city="Oslo"),
        tags=["gift"],
        extra={"n": 1},
    )

    assert plan["facts"] == {
        "order": "string",
        "amount": "integer",
        "rate": "number",
        "express": "boolean",
        "currency": "string",
        "colour": "string",
        "ship_to": "object",
        "tags": "array",
        "extra": "object",
    }
    assert fact_issues(plan.facts, instance.model_dump(mode="json")) == []


class NullableFacts(BaseModel):
    order: str
    note: str | None


def test_unsupported_fact_types_are_all_named_by_path() -> None:
    with pytest.raises(PlanCheckError) as excinfo:
        Plan(
            "p",
            facts={"order": str, "when": datetime.datetime, "note": str | None, "raw": Any},
            steps=[step("a", "v", compensate=no_compensation)],
        )
    issues = {issue.path: issue.message for issue in excinfo.value.issues}

    assert sorted(issues) == ["facts.note", "facts.raw", "facts.when"]
    assert issues["facts.when"].startswith("type datetime has no plan fact type")
    assert "never null" in issues["facts.note"]
    with pytest.raises(PlanCheckError, match=r"facts\.note: .*never null"):
        Plan("p", facts=NullableFacts, steps=[step("a", "v", compensate=no_compensation)])
    with pytest.raises(TypeError, match="facts must be"):
        Plan("p", facts="order", steps=[])  # type: ignore[arg-type]


# --- parallel steps ----------------------------------------------------------------------------


def test_a_fan_out_and_its_join_built_with_after_are_the_json_form_with_the_same_digest(
    example_verbs: dict[str, VerbContract],
) -> None:
    release = compensate("inventory.release", {"reservation_id": result("hold", "/id")})
    plan = Plan(
        "shop",
        facts={"order": str},
        steps=[
            step("hold", "inventory.reserve", {"order": fact("order")}, compensate=release),
            step("reserve-a", "inventory.reserve", compensate=no_compensation, after=["hold"]),
            step("reserve-b", "inventory.reserve", compensate=no_compensation, after=("hold",)),
            step("notify", "shipping.schedule", compensate=no_compensation, after=[]),
            step(
                "charge",
                "payments.charge",
                {"account_id": result("reserve-a", "/account"), "amount": 1},
                compensate=no_compensation,
                after=iter(["reserve-a", "reserve-b"]),
            ),
        ],
    )
    as_json = plan.to_json()

    assert [each.get("after") for each in as_json["steps"]] == [
        None,
        ["hold"],
        ["hold"],
        [],
        ["reserve-a", "reserve-b"],
    ]
    assert "after" not in as_json["steps"][0]  # left out: no "after", as a sequential plan
    built = plan.check(example_verbs)
    assert built == check(json.loads(json.dumps(as_json)), example_verbs)
    assert [s.after for s in built.steps][1:] == [
        ("hold",),
        ("hold",),
        (),
        ("reserve-a", "reserve-b"),
    ]


def test_after_naming_an_unknown_step_is_reported_at_the_json_forms_path(
    example_verbs: dict[str, VerbContract],
) -> None:
    plan = Plan(
        "p",
        steps=[
            step("a", "inventory.reserve", compensate=no_compensation),
            step("b", "inventory.reserve", compensate=no_compensation, after=["a", "ghost"]),
        ],
    )

    with pytest.raises(PlanCheckError) as raised:
        plan.check(example_verbs)

    assert [str(issue) for issue in raised.value.issues] == [
        "steps[1].after[1]: unknown step 'ghost'"
    ]


@pytest.mark.parametrize("steps", [[], None], ids=["empty-list", "missing"])
def test_a_plan_without_steps_is_refused_in_our_words_at_steps(
    steps: list[Any] | None, example_verbs: dict[str, VerbContract]
) -> None:
    document: dict[str, Any] = {"plan_id": "p"}
    if steps is not None:
        document["steps"] = steps

    with pytest.raises(PlanCheckError) as raised:
        check(document, example_verbs)

    expected = "a plan needs at least one step" if steps is not None else "missing"
    assert [str(issue) for issue in raised.value.issues] == [f"steps: {expected}"]
    with pytest.raises(PlanCheckError) as built:
        Plan("p", steps=[]).check(example_verbs)
    assert [str(issue) for issue in built.value.issues] == ["steps: a plan needs at least one step"]

"""The pure half of submit: checking what is submitted and the rows it would write."""

from __future__ import annotations

import json
from typing import Any

import pytest

from effectusd.core.canonical import canonical_bytes, canonical_hash, canonical_text
from effectusd.core.checker import PlanCheckError, check
from effectusd.core.contracts import VerbContract
from effectusd.core.identity import idempotency_key, saga_id
from effectusd.core.plan import CheckedPlan
from effectusd.core.registry import Registry
from effectusd.core.states import Direction
from effectusd.core.submission import (
    EXECUTION_ID_MAX,
    SubmitError,
    SubmitRows,
    conflict_with_existing,
    ensure_checked,
    prepare_submission,
)
from tests.unit.conftest import VECTOR_EXECUTION, VECTOR_FACTS, VECTOR_NAMESPACE

VECTOR_SAGA_ID = "53c4d5234ab09a8d5912898c4e385b0a86809796ccca87c3959d7755085345f8"
VECTOR_FORWARD_KEY = "8574e6019624ecdc867c223762cb0e8f2f1bca2924d07b3563fd0c977bbbab6e"
VECTOR_CANONICAL = '{"amount":1250,"currency":"EUR","order":"o-1"}'
VECTOR_ARGUMENT_HASH = "c15a5ceb896021e05f9224fdba000d9c5dfb42b47fe52db99e0e8d3699ab34d4"


@pytest.fixture
def checked(checkout_plan: dict[str, Any], core_verbs: dict[str, VerbContract]) -> CheckedPlan:
    return check(checkout_plan, core_verbs)


@pytest.fixture
def rows(checked: CheckedPlan, core_registry: Registry) -> SubmitRows:
    return prepare_submission(
        checked, core_registry, VECTOR_NAMESPACE, VECTOR_EXECUTION, VECTOR_FACTS
    )


def _fact_issue_paths(
    checked: CheckedPlan, registry: Registry, facts: dict[str, Any]
) -> dict[str, str]:
    with pytest.raises(PlanCheckError) as excinfo:
        prepare_submission(checked, registry, VECTOR_NAMESPACE, VECTOR_EXECUTION, facts)
    return {issue.path: issue.message for issue in excinfo.value.issues}


# --- prepare_submission ------------------------------------------------------------------------


def test_submission_derives_the_design_vector_identities(rows: SubmitRows) -> None:
    assert rows.saga_id == VECTOR_SAGA_ID
    [first] = rows.first_dispatches
    assert first.saga_id == VECTOR_SAGA_ID
    assert first.idempotency_key == VECTOR_FORWARD_KEY
    assert first.args_canonical == VECTOR_CANONICAL
    assert first.args_hash == VECTOR_ARGUMENT_HASH


def test_submission_rows_carry_the_checked_plan_and_canonical_facts(
    rows: SubmitRows, checked: CheckedPlan
) -> None:
    assert (rows.namespace, rows.execution_id, rows.plan_id) == (
        VECTOR_NAMESPACE,
        VECTOR_EXECUTION,
        "checkout",
    )
    assert rows.plan_digest == checked.plan_digest
    assert CheckedPlan.model_validate(json.loads(rows.plan)) == checked
    assert rows.facts.encode("utf-8") == canonical_bytes(VECTOR_FACTS)
    assert rows.facts_hash == canonical_hash(VECTOR_FACTS)
    assert [(d.effect_id, d.direction) for d in rows.first_dispatches] == [("charge", "forward")]


def test_facts_hash_does_not_depend_on_fact_order(
    checked: CheckedPlan, core_registry: Registry
) -> None:
    reordered = dict(reversed(list(VECTOR_FACTS.items())))
    again = prepare_submission(
        checked, core_registry, VECTOR_NAMESPACE, VECTOR_EXECUTION, reordered
    )
    assert again.facts_hash == canonical_hash(VECTOR_FACTS)


@pytest.mark.parametrize(
    ("facts", "path", "fragment"),
    [
        ({"order": "o-1"}, "facts.amount", "missing"),
        ({**VECTOR_FACTS, "coupon": "X"}, "facts.coupon", "not declared"),
        ({"order": "o-1", "amount": True}, "facts.amount", "bool"),
        ({"order": "o-1", "amount": 1250.0}, "facts.amount", "float"),
        ({"order": "o-1", "amount": "1250"}, "facts.amount", "str"),
        ({"order": 7, "amount": 1250}, "facts.order", "int"),
        ({"order": "o-1", "amount": 2**60}, "facts.amount", "2^53"),
        ({"order": "o-\ud800", "amount": 1250}, "facts.order", "surrogate"),
    ],
    ids=[
        "missing",
        "undeclared",
        "bool_for_integer",
        "float_for_integer",
        "string_for_integer",
        "integer_for_string",
        "unsafe_integer",
        "lone_surrogate",
    ],
)
def test_bad_facts_are_refused_naming_the_fact(
    checked: CheckedPlan,
    core_registry: Registry,
    facts: dict[str, Any],
    path: str,
    fragment: str,
) -> None:
    issues = _fact_issue_paths(checked, core_registry, facts)
    assert path in issues
    assert fragment in issues[path]


@pytest.mark.parametrize(
    ("kind", "good", "bad"),
    [
        ("number", 1.5, True),
        ("number", 2, "2"),
        ("boolean", False, 0),
        ("object", {"a": 1}, [1]),
        ("array", [1], {"a": 1}),
        ("string", "", None),
    ],
)
def test_fact_types_are_exact_json_types(
    core_verbs: dict[str, VerbContract], core_registry: Registry, kind: str, good: Any, bad: Any
) -> None:
    plan = {
        "plan_id": "p",
        "facts": {"f": kind},
        "steps": [{"id": "s", "verb": "notify", "args": {}, "compensate": "none"}],
    }
    checked = check(plan, core_verbs)
    prepare_submission(checked, core_registry, "ns", "e-1", {"f": good})
    issues = _fact_issue_paths(checked, core_registry, {"f": bad})
    assert f"expected {kind}" in issues["facts.f"]


def test_every_fact_problem_is_reported_at_once(
    checked: CheckedPlan, core_registry: Registry
) -> None:
    issues = _fact_issue_paths(checked, core_registry, {"order": False, "extra": 1})
    assert set(issues) == {"facts.order", "facts.amount", "facts.extra"}


def test_first_step_that_cannot_be_resolved_refuses_the_submit_naming_the_step(
    checked: CheckedPlan, core_registry: Registry
) -> None:
    with pytest.raises(SubmitError, match="step 'charge'"):
        prepare_submission(
            checked,
            core_registry,
            VECTOR_NAMESPACE,
            VECTOR_EXECUTION,
            {"order": "o-1", "amount": 0},
        )


@pytest.mark.parametrize(
    "execution_id",
    ["order 7", "", "x" * (EXECUTION_ID_MAX + 1), "ordér-7", "order-7\n", "a\tb", "\x7f"],
    ids=["space", "empty", "too_long", "non_ascii", "newline", "tab", "del"],
)
def test_bad_execution_id_is_refused(
    checked: CheckedPlan, core_registry: Registry, execution_id: str
) -> None:
    with pytest.raises(SubmitError, match="execution_id"):
        prepare_submission(checked, core_registry, VECTOR_NAMESPACE, execution_id, VECTOR_FACTS)


@pytest.mark.parametrize("execution_id", ["x" * EXECUTION_ID_MAX, "a", "order:7/#~!"])
def test_execution_id_of_printable_ascii_up_to_the_limit_is_accepted(
    checked: CheckedPlan, core_registry: Registry, execution_id: str
) -> None:
    rows = prepare_submission(checked, core_registry, VECTOR_NAMESPACE, execution_id, VECTOR_FACTS)
    assert rows.execution_id == execution_id
    assert rows.saga_id == saga_id(VECTOR_NAMESPACE, execution_id, checked.plan_id)


# --- ensure_checked ----------------------------------------------------------------------------


def test_ensure_checked_accepts_a_checked_plan_document(
    checked: CheckedPlan, core_registry: Registry
) -> None:
    document = json.loads(canonical_text(checked.document()))
    assert ensure_checked(document, core_registry) == checked


def test_ensure_checked_checks_a_raw_plan(
    checkout_plan: dict[str, Any], checked: CheckedPlan, core_registry: Registry
) -> None:
    assert ensure_checked(checkout_plan, core_registry) == checked


def test_ensure_checked_refuses_a_raw_plan_that_does_not_check(
    checkout_plan: dict[str, Any], core_registry: Registry
) -> None:
    checkout_plan["steps"][1]["verb"] = "teleport"
    with pytest.raises(PlanCheckError, match=r"steps\[1\]\.verb"):
        ensure_checked(checkout_plan, core_registry)


def test_ensure_checked_refuses_an_edited_digest(
    checked: CheckedPlan, core_registry: Registry
) -> None:
    document = checked.document()
    document["plan_digest"] = "f" * 64
    with pytest.raises(PlanCheckError) as excinfo:
        ensure_checked(document, core_registry)
    assert [issue.path for issue in excinfo.value.issues] == ["plan_digest"]


def test_ensure_checked_refuses_an_edited_step(
    checked: CheckedPlan, core_registry: Registry
) -> None:
    document = checked.document()
    document["steps"][0]["args"]["currency"] = "USD"
    with pytest.raises(PlanCheckError) as excinfo:
        ensure_checked(document, core_registry)
    assert [issue.path for issue in excinfo.value.issues] == ["plan_digest"]


def test_ensure_checked_refuses_a_plan_pinned_to_a_drifted_contract(
    checked: CheckedPlan, core_verbs: dict[str, VerbContract]
) -> None:
    core_verbs["charge"] = core_verbs["charge"].model_copy(update={"version": 2})
    with pytest.raises(PlanCheckError, match="contract drift"):
        ensure_checked(checked.document(), Registry(core_verbs))
    with pytest.raises(PlanCheckError, match="contract drift"):
        ensure_checked(checked, Registry(core_verbs))


@pytest.mark.parametrize(
    "edit",
    [
        lambda document: document.update(extra=1),
        lambda document: document.update(format="effectusd/checked-plan/v2"),
        lambda document: document["steps"][0].pop("contract_hash"),
    ],
    ids=["extra_key", "format", "missing_contract_hash"],
)
def test_ensure_checked_refuses_a_malformed_checked_plan_document(
    checked: CheckedPlan, core_registry: Registry, edit: Any
) -> None:
    document = checked.document()
    edit(document)
    with pytest.raises(PlanCheckError, match="not a checked plan"):
        ensure_checked(document, core_registry)


def _forged(checked: CheckedPlan, edit: Any) -> dict[str, Any]:
    """A checked-plan document edited and then re-digested: the digest is not a signature."""
    document = checked.document()
    edit(document)
    del document["plan_digest"]
    document["plan_digest"] = canonical_hash(document)
    return document


@pytest.mark.parametrize(
    "edit",
    [
        lambda document: document["steps"][1].update(id="ship\r\nX-Evil: 1"),
        lambda document: document["steps"][1].update(id="charge"),
        lambda document: document["steps"][0]["args"].update(x={"$result": "ship"}),
        lambda document: document["steps"][0]["args"].update(x={"$fact": "undeclared"}),
        lambda document: document["steps"][0]["args"].update(currency="GBP"),
    ],
    ids=["header_injection_id", "duplicate_id", "forward_result", "undeclared_fact", "schema"],
)
def test_ensure_checked_refuses_a_redigested_document_that_would_not_check(
    checked: CheckedPlan, core_registry: Registry, edit: Any
) -> None:
    with pytest.raises(PlanCheckError):
        ensure_checked(_forged(checked, edit), core_registry)


# --- conflicts ---------------------------------------------------------------------------------


def test_same_digest_and_facts_is_not_a_conflict(rows: SubmitRows) -> None:
    assert conflict_with_existing(rows, rows.plan_digest, rows.facts_hash) is None


def test_conflict_names_a_different_plan_digest(rows: SubmitRows) -> None:
    message = conflict_with_existing(rows, "e" * 64, rows.facts_hash)
    assert message is not None
    assert "plan digest" in message
    assert "facts" not in message
    assert rows.saga_id in message and "'order-7'" in message and "'checkout'" in message


def test_conflict_names_different_facts(rows: SubmitRows) -> None:
    message = conflict_with_existing(rows, rows.plan_digest, "e" * 64)
    assert message is not None
    assert "facts differ" in message
    assert "plan digest" not in message


def test_conflict_names_both_differences(rows: SubmitRows) -> None:
    message = conflict_with_existing(rows, "e" * 64, "d" * 64)
    assert message is not None
    assert "plan digest" in message and "facts differ" in message


def test_resubmitting_with_other_facts_is_detected_as_a_conflict(
    rows: SubmitRows, checked: CheckedPlan, core_registry: Registry
) -> None:
    other = prepare_submission(
        checked, core_registry, VECTOR_NAMESPACE, VECTOR_EXECUTION, {"order": "o-1", "amount": 1}
    )
    assert other.saga_id == rows.saga_id
    assert conflict_with_existing(other, rows.plan_digest, rows.facts_hash) is not None
    assert other.first_dispatches[0].idempotency_key == idempotency_key(
        VECTOR_NAMESPACE, rows.saga_id, "charge", Direction.FORWARD
    )

"""build_dispatch: one step, resolved and frozen into the outbox row that will dispatch it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from effectusd.core.canonical import canonical_bytes
from effectusd.core.checker import check
from effectusd.core.contracts import VerbContract
from effectusd.core.enqueue import SagaRef, build_dispatch
from effectusd.core.expressions import ResolutionError
from effectusd.core.identity import argument_hash, idempotency_key, saga_id
from effectusd.core.plan import CheckedPlan
from effectusd.core.registry import DEFAULT_TIMEOUT, Registry
from effectusd.core.states import Direction
from tests.unit.conftest import (
    VECTOR_EXECUTION,
    VECTOR_FACTS,
    VECTOR_NAMESPACE,
    VECTOR_PLAN,
)

VECTOR_SAGA_ID = "53c4d5234ab09a8d5912898c4e385b0a86809796ccca87c3959d7755085345f8"
VECTOR_FORWARD_KEY = "8574e6019624ecdc867c223762cb0e8f2f1bca2924d07b3563fd0c977bbbab6e"
VECTOR_COMPENSATION_KEY = "1f6a13cbde0f5e5d5eacddf74ea107b1474ea453501d7c2e3fd8e0c8747b2d5b"
VECTOR_CANONICAL = '{"amount":1250,"currency":"EUR","order":"o-1"}'
VECTOR_ARGUMENT_HASH = "c15a5ceb896021e05f9224fdba000d9c5dfb42b47fe52db99e0e8d3699ab34d4"

CHARGE_RESULT = {"charge_id": "ch 1?2"}


@pytest.fixture
def saga() -> SagaRef:
    return SagaRef(
        saga_id(VECTOR_NAMESPACE, VECTOR_EXECUTION, VECTOR_PLAN), VECTOR_NAMESPACE, VECTOR_EXECUTION
    )


@pytest.fixture
def checked(checkout_plan: dict[str, Any], core_verbs: dict[str, VerbContract]) -> CheckedPlan:
    return check(checkout_plan, core_verbs)


def test_forward_dispatch_pins_the_design_vectors(
    saga: SagaRef, checked: CheckedPlan, core_registry: Registry
) -> None:
    spec = build_dispatch(
        saga, checked.step("charge"), Direction.FORWARD, core_registry, VECTOR_FACTS, {}
    )
    assert spec.saga_id == VECTOR_SAGA_ID
    assert spec.args_canonical == VECTOR_CANONICAL
    assert spec.args_hash == VECTOR_ARGUMENT_HASH
    assert spec.idempotency_key == VECTOR_FORWARD_KEY


def test_forward_dispatch_freezes_the_verb_contract(
    saga: SagaRef, checked: CheckedPlan, core_registry: Registry
) -> None:
    step = checked.step("charge")
    spec = build_dispatch(saga, step, Direction.FORWARD, core_registry, VECTOR_FACTS, {})
    contract = core_registry.verbs["charge"]
    assert (spec.effect_id, spec.direction, spec.verb) == ("charge", "forward", "charge")
    assert (spec.namespace, spec.execution_id) == (VECTOR_NAMESPACE, VECTOR_EXECUTION)
    assert spec.contract_hash == step.contract_hash == contract.contract_hash
    assert spec.destination == contract.destination
    assert spec.method == contract.method
    assert spec.delivery == contract.delivery.value
    assert spec.path == "/orders/o-1/charges"
    assert spec.fencing_resources == ["order:o-1"]  # args and facts templates deduplicated
    assert spec.timeout_ms == 2000
    assert spec.max_attempts == contract.retry.max_attempts == 3


def test_args_hash_is_the_hash_of_the_exact_canonical_body(
    saga: SagaRef, checked: CheckedPlan, core_registry: Registry
) -> None:
    facts = {"order": "ö ü#1", "amount": 99}
    spec = build_dispatch(saga, checked.step("charge"), Direction.FORWARD, core_registry, facts, {})
    body = spec.args_canonical.encode("utf-8")
    assert body == canonical_bytes({"order": "ö ü#1", "currency": "EUR", "amount": 99})
    assert spec.args_hash == argument_hash(body)
    assert spec.path == "/orders/%C3%B6%20%C3%BC%231/charges"
    assert spec.fencing_resources == ["order:ö ü#1"]  # resources are names, not URLs


def test_compensation_uses_the_compensation_verb_and_its_key(
    saga: SagaRef, checked: CheckedPlan, core_registry: Registry
) -> None:
    step = checked.step("charge")
    spec = build_dispatch(
        saga, step, Direction.COMPENSATION, core_registry, VECTOR_FACTS, {"charge": CHARGE_RESULT}
    )
    assert step.compensate is not None
    assert (spec.effect_id, spec.direction, spec.verb) == ("charge", "compensation", "refund")
    assert spec.contract_hash == step.compensate.contract_hash
    assert spec.method == "DELETE"
    assert spec.idempotency_key == VECTOR_COMPENSATION_KEY
    assert spec.idempotency_key == idempotency_key(
        saga.namespace, saga.saga_id, "charge", Direction.COMPENSATION
    )
    assert spec.args_canonical == canonical_bytes(CHARGE_RESULT).decode("utf-8")
    assert spec.path == "/charges/ch%201%3F2"


def test_later_step_resolves_results_of_earlier_steps(
    saga: SagaRef, checked: CheckedPlan, core_registry: Registry
) -> None:
    spec = build_dispatch(
        saga,
        checked.step("ship"),
        Direction.FORWARD,
        core_registry,
        VECTOR_FACTS,
        {"charge": CHARGE_RESULT},
    )
    assert spec.args_canonical == canonical_bytes(
        {"order": "o-1", "charge": "ch 1?2", "lines": [{"sku": "A-1", "qty": 2}]}
    ).decode("utf-8")
    assert spec.idempotency_key == idempotency_key(
        saga.namespace, saga.saga_id, "ship", Direction.FORWARD
    )
    assert spec.delivery == "at_least_once"
    assert spec.timeout_ms == 30_000  # the destination's default timeout
    assert spec.fencing_resources == []


def test_default_timeout_applies_without_contract_or_destination_timeout(
    saga: SagaRef, checked: CheckedPlan, core_verbs: dict[str, VerbContract]
) -> None:
    spec = build_dispatch(
        saga,
        checked.step("ship"),
        Direction.FORWARD,
        Registry(core_verbs),
        VECTOR_FACTS,
        {"charge": CHARGE_RESULT},
    )
    assert spec.timeout_ms == DEFAULT_TIMEOUT // timedelta(milliseconds=1)


def test_step_without_compensation_refuses_a_compensation_dispatch(
    saga: SagaRef, checked: CheckedPlan, core_registry: Registry
) -> None:
    with pytest.raises(ResolutionError, match="'ship'"):
        build_dispatch(
            saga, checked.step("ship"), Direction.COMPENSATION, core_registry, VECTOR_FACTS, {}
        )


@pytest.mark.parametrize(
    ("facts", "results", "fragment"),
    [
        ({"order": "o-1", "amount": "1250"}, {}, "schema"),
        ({"order": "o-1", "amount": 0}, {}, "schema"),
        ({"order": "o-1"}, {}, "'amount'"),
        ({"order": "o-1", "amount": float("nan")}, {}, "NaN"),
        ({"order": "..", "amount": 5}, {}, "'..'"),
        ({"order": True, "amount": 5}, {}, "schema"),
    ],
    ids=["schema_type", "schema_minimum", "missing_fact", "nan", "dotdot_segment", "bool"],
)
def test_unresolvable_forward_arguments_raise_naming_the_step(
    saga: SagaRef,
    checked: CheckedPlan,
    core_registry: Registry,
    facts: dict[str, Any],
    results: dict[str, Any],
    fragment: str,
) -> None:
    with pytest.raises(ResolutionError) as excinfo:
        build_dispatch(
            saga, checked.step("charge"), Direction.FORWARD, core_registry, facts, results
        )
    message = str(excinfo.value)
    assert message.startswith("step 'charge' (forward): ")
    assert fragment in message


@pytest.mark.parametrize(
    "results",
    [{}, {"charge": {}}, {"charge": {"charge_id": 5}}, {"charge": {"charge_id": "a/b"}}],
    ids=["no_result", "pointer_misses", "schema_type", "slash_in_segment"],
)
def test_unresolvable_compensation_arguments_raise_naming_the_step(
    saga: SagaRef, checked: CheckedPlan, core_registry: Registry, results: dict[str, Any]
) -> None:
    with pytest.raises(ResolutionError, match=r"^step 'charge' \(compensation\): "):
        build_dispatch(
            saga,
            checked.step("charge"),
            Direction.COMPENSATION,
            core_registry,
            VECTOR_FACTS,
            results,
        )


def test_verb_missing_from_the_live_registry_is_a_resolution_error(
    saga: SagaRef, checked: CheckedPlan, core_verbs: dict[str, VerbContract]
) -> None:
    del core_verbs["charge"]
    with pytest.raises(ResolutionError, match="'charge'"):
        build_dispatch(
            saga, checked.step("charge"), Direction.FORWARD, Registry(core_verbs), VECTOR_FACTS, {}
        )


def test_drifted_contract_is_refused_not_dispatched_with_the_new_destination(
    saga: SagaRef, checked: CheckedPlan, core_verbs: dict[str, VerbContract]
) -> None:
    core_verbs["charge"] = core_verbs["charge"].model_copy(update={"destination": "elsewhere"})
    with pytest.raises(ResolutionError, match="'charge'"):
        build_dispatch(
            saga, checked.step("charge"), Direction.FORWARD, Registry(core_verbs), VECTOR_FACTS, {}
        )


def test_odd_array_index_in_result_pointer_is_a_resolution_error(
    saga: SagaRef, checkout_plan: dict[str, Any], core_registry: Registry
) -> None:
    checkout_plan["steps"][1]["args"]["charge"]["path"] = "/lines/\u00b2"
    checked = check(checkout_plan, core_registry.verbs)
    with pytest.raises(ResolutionError, match="'ship'"):
        build_dispatch(
            saga,
            checked.step("ship"),
            Direction.FORWARD,
            core_registry,
            VECTOR_FACTS,
            {"charge": {"lines": [1, 2, 3]}},
        )

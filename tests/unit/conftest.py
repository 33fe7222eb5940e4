"""Fixtures for the pure-core unit tests: a small verb registry and the
docs/design.md checkout plan.

The plan uses the inputs of the docs/design.md section 2 vectors (namespace ``default``, execution
``order-7``, plan ``checkout``, step ``charge``, arguments ``{"order":"o-1","currency":"EUR",
"amount":1250}``) so that end-to-end tests can pin the published identities.
"""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest

from effectusd.core.contracts import VerbContract
from effectusd.core.registry import Registry

VECTOR_NAMESPACE = "default"
VECTOR_EXECUTION = "order-7"
VECTOR_PLAN = "checkout"
VECTOR_STEP = "charge"
VECTOR_FACTS: dict[str, Any] = {"order": "o-1", "amount": 1250}


def make_core_verbs() -> dict[str, VerbContract]:
    charge = VerbContract(
        name="charge",
        destination="payments",
        path="/orders/{args.order}/charges",
        args_schema={
            "type": "object",
            "properties": {
                "order": {"type": "string"},
                "currency": {"type": "string", "enum": ["EUR", "USD"]},
                "amount": {"type": "integer", "minimum": 1},
            },
            "required": ["order", "currency", "amount"],
        },
        timeout="2s",
        retry={"max_attempts": 3},
        fencing=("order:{args.order}", "order:{facts.order}"),
    )
    refund = VerbContract(
        name="refund",
        destination="payments",
        method="DELETE",
        path="/charges/{args.charge_id}",
        args_schema={
            "type": "object",
            "properties": {"charge_id": {"type": "string"}},
            "required": ["charge_id"],
        },
    )
    ship = VerbContract(
        name="ship",
        destination="warehouse",
        path="/shipments",
        delivery="at_least_once",
        retry={"max_attempts": 7},
    )
    notify = VerbContract(name="notify", destination="mailer", path="/messages")
    hold = VerbContract(
        name="hold",
        destination="warehouse",
        path="/holds/{args.sku}",
        fencing=("sku:{args.sku}", "region:{facts.region}"),
    )
    return {verb.name: verb for verb in (charge, refund, ship, notify, hold)}


@pytest.fixture
def core_verbs() -> dict[str, VerbContract]:
    return make_core_verbs()


@pytest.fixture
def core_registry(core_verbs: dict[str, VerbContract]) -> Registry:
    return Registry(core_verbs, destination_timeouts={"warehouse": timedelta(seconds=30)})


CHECKOUT_PLAN: dict[str, Any] = {
    "plan_id": VECTOR_PLAN,
    "facts": {"order": "string", "amount": "integer"},
    "steps": [
        {
            "id": VECTOR_STEP,
            "verb": "charge",
            "args": {
                "order": {"$fact": "order"},
                "currency": "EUR",
                "amount": {"$fact": "amount"},
            },
            "compensate": {
                "verb": "refund",
                "args": {"charge_id": {"$result": "charge", "path": "/charge_id"}},
            },
        },
        {
            "id": "ship",
            "verb": "ship",
            "args": {
                "order": {"$fact": "order"},
                "charge": {"$result": "charge", "path": "/charge_id"},
                "lines": [{"sku": "A-1", "qty": 2}],
            },
            "compensate": "none",
        },
    ],
}


@pytest.fixture
def checkout_plan() -> dict[str, Any]:
    """A fresh deep copy of the valid checkout plan, safe to edit in a test."""
    return copy.deepcopy(CHECKOUT_PLAN)

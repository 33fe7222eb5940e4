"""Verb contracts (docs/design.md section 4): validation and what the contract hash covers."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from effectusd.core.contracts import RetryPolicy, VerbContract, pinned

BASE: dict[str, Any] = {
    "name": "charge",
    "version": 1,
    "destination": "payments",
    "method": "POST",
    "path": "/orders/{args.order}/charges",
    "args_schema": {"type": "object", "properties": {"amount": {"type": "integer"}}},
    "result_schema": {"type": "object"},
    "delivery": "at_most_once",
    "timeout": "500ms",
    "retry": {"max_attempts": 5, "initial_backoff": "1s", "max_backoff": "1m", "multiplier": 2},
    "fencing": ("order:{args.order}",),
}


def _contract(**changes: Any) -> VerbContract:
    return VerbContract.model_validate({**BASE, **changes})


def _retry(**changes: Any) -> dict[str, Any]:
    return {**BASE["retry"], **changes}


@pytest.mark.parametrize(
    "changes",
    [
        {"name": "charge2"},
        {"version": 2},
        {"destination": "payments-eu"},
        {"method": "PUT"},
        {"path": "/orders/{args.order}/charge"},
        {"args_schema": {"type": "object", "properties": {"amount": {"type": "number"}}}},
        {"args_schema": None},
        {"result_schema": {"type": "object", "required": ["id"]}},
        {"delivery": "at_least_once"},
        {"fencing": ("order:{args.order}", "acct:{facts.account}")},
        {"fencing": ()},
    ],
    ids=lambda changes: ",".join(changes),
)
def test_contract_hash_changes_when_a_field_that_decides_the_effect_changes(
    changes: dict[str, Any],
) -> None:
    assert _contract(**changes).contract_hash != _contract().contract_hash
    assert not pinned(_contract(**changes), _contract().contract_hash)


@pytest.mark.parametrize(
    "changes",
    [
        {"timeout": "501ms"},
        {"timeout": None},
        {"retry": _retry(max_attempts=6)},
        {"retry": _retry(max_attempts=1)},
        {"retry": _retry(initial_backoff="2s")},
        {"retry": _retry(max_backoff="2m")},
        {"retry": _retry(multiplier=1.5)},
        {"timeout": "30s", "retry": _retry(max_attempts=9, initial_backoff="5s")},
    ],
    ids=lambda changes: ",".join(changes),
)
def test_operational_tuning_keeps_the_contract_hash(changes: dict[str, Any]) -> None:
    """Timeout and retry policy are live, not pinned: tuning them blocks no saga."""
    assert _contract(**changes).contract_hash == _contract().contract_hash
    assert pinned(_contract(**changes), _contract().contract_hash)


# The hash of BASE as releases before the pinned/live split computed it (timeout and retry
# included). Sagas submitted by them carry such hashes in their plans and outbox rows.
LEGACY_BASE_HASH = "acb547fe1e6b3f31df5c5444c9406f400d914d5ad2dae11e8ada8f78cd0ddab1"


def test_a_saga_pinned_by_an_older_release_still_matches_an_unchanged_contract() -> None:
    assert _contract().legacy_contract_hash == LEGACY_BASE_HASH
    assert _contract().contract_hash != LEGACY_BASE_HASH
    assert pinned(_contract(), LEGACY_BASE_HASH)
    # the old hash covered the retry policy: a tuned verb no longer matches it (adopt-contract)
    assert not pinned(_contract(retry=_retry(max_attempts=6)), LEGACY_BASE_HASH)
    assert not pinned(_contract(path="/charges"), LEGACY_BASE_HASH)


# The legacy hashes of a verb configured without a retry table, and with a partial one, as the
# release before give_up_after computed them (old defaults: 5 attempts, 500ms doubling to 1m).
LEGACY_WITHOUT_RETRY_TABLE = "2ffc6c935d6bfd62d1398aea87e73e15e871ec85d348fcdd8d617f6d0cfe6548"
LEGACY_WITH_MAX_ATTEMPTS_3 = "93f387c0a0ff6412d0cb0efd9ead07eab9a040ba92eeaa6a71a46c69eb6dcea9"


def test_new_retry_defaults_keep_the_legacy_hash_of_an_unchanged_configuration() -> None:
    plain = {"name": "shipping.schedule", "destination": "shipping", "path": "/ship"}
    assert VerbContract.model_validate(plain).legacy_contract_hash == LEGACY_WITHOUT_RETRY_TABLE
    assert pinned(VerbContract.model_validate(plain), LEGACY_WITHOUT_RETRY_TABLE)
    partial = {**plain, "retry": {"max_attempts": 3}}
    assert VerbContract.model_validate(partial).legacy_contract_hash == LEGACY_WITH_MAX_ATTEMPTS_3
    # give_up_after is live and never hashed, whatever its value
    budgeted = {**plain, "retry": {"give_up_after": "2h"}}
    assert VerbContract.model_validate(budgeted).legacy_contract_hash == LEGACY_WITHOUT_RETRY_TABLE
    assert VerbContract.model_validate(budgeted).contract_hash == (
        VerbContract.model_validate(plain).contract_hash
    )


def test_retry_defaults_are_one_second_doubling_to_five_minutes_for_a_day() -> None:
    policy = RetryPolicy()
    assert (policy.initial_backoff, policy.multiplier, policy.max_backoff) == (
        timedelta(seconds=1),
        2.0,
        timedelta(minutes=5),
    )
    assert (policy.give_up_after, policy.max_attempts) == (timedelta(hours=24), 5)


@pytest.mark.parametrize(
    "changes",
    [
        {"timeout": "0.5s"},
        {"timeout": "500ms"},
        {"timeout": timedelta(milliseconds=500)},
        {"retry": _retry(initial_backoff="1s", max_backoff="60s", multiplier=2.0)},
        {"retry": RetryPolicy(initial_backoff="1000ms", max_backoff="1m", multiplier=2)},
        {"args_schema": {"properties": {"amount": {"type": "integer"}}, "type": "object"}},
        {"fencing": ["order:{args.order}"]},
    ],
    ids=lambda changes: ",".join(changes),
)
def test_contract_hash_is_stable_across_equivalent_spellings(changes: dict[str, Any]) -> None:
    assert _contract(**changes).contract_hash == _contract().contract_hash


def test_contract_hash_is_lowercase_hex_sha256() -> None:
    value = _contract().contract_hash
    assert len(value) == 64
    assert value == value.lower()
    int(value, 16)


def test_defaults_are_at_most_once_post_and_five_attempts() -> None:
    verb = VerbContract(name="v", destination="d")
    assert (verb.delivery.value, verb.method, verb.retry.max_attempts) == (
        "at_most_once",
        "POST",
        5,
    )


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"path": "orders/{args.order}"}, "path"),
        ({"path": "/orders/{facts.order}"}, "path"),
        ({"path": "/orders/{args.order"}, "path"),
        ({"path": "/orders/{nope.order}"}, "path"),
        ({"fencing": ("order:{args.order", "ok")}, "fencing"),
        ({"fencing": ("order:{result.x}",)}, "fencing"),
        ({"method": "GET"}, "method"),
        ({"delivery": "exactly_once"}, "delivery"),
        ({"name": "1charge"}, "name"),
        ({"name": "has space"}, "name"),
        ({"version": 0}, "version"),
        ({"retry": _retry(max_attempts=0)}, "retry"),
        ({"retry": _retry(multiplier=0.5)}, "retry"),
        ({"timeout": "soon"}, "timeout"),
        ({"args_schema": {"maximum": float("nan")}}, "args_schema"),
        ({"unknown_field": 1}, "unknown_field"),
    ],
)
def test_invalid_contract_fields_are_refused_naming_the_field(
    changes: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError) as excinfo:
        _contract(**changes)
    assert {str(error["loc"][0]) for error in excinfo.value.errors()} == {field}


def test_contracts_are_frozen() -> None:
    contract = _contract()
    with pytest.raises(ValidationError):
        contract.version = 2  # type: ignore[misc]


def test_an_invalid_json_schema_is_refused_when_the_contract_is_built() -> None:
    with pytest.raises(ValidationError):
        _contract(args_schema={"type": "strng"})


def test_an_overflowing_timeout_is_a_validation_error_naming_the_field() -> None:
    with pytest.raises(ValidationError) as excinfo:
        _contract(timeout="9999999999999999d")
    assert excinfo.value.errors()[0]["loc"][0] == "timeout"


def test_a_verb_no_longer_configured_pins_nothing() -> None:
    assert not pinned(None, _contract().contract_hash)

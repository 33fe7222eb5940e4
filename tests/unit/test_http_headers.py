"""encode_request_headers is pure: one invocation in, the exact identity headers out."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta, timezone

import pytest

from effectusd.core.states import Direction, FencingStatus
from effectusd.core.wire import WireError, encode_request_headers, format_deadline
from effectusd.executors.protocol import FencingGrant, Invocation

BASE = Invocation(
    request_id="r-1",
    execution_id="order-7",
    saga_id="s" * 64,
    effect_id="charge",
    attempt=1,
    direction=Direction.COMPENSATION,
    verb="payments.refund",
    method="POST",
    path="/refunds",
    body=b"{}",
    argument_hash="a" * 64,
    contract_hash="c" * 64,
    idempotency_key="k" * 64,
    fencing_grants=(),
    deadline=datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC),
    key_issued_at=datetime(2030, 1, 1, 3, 4, 5, 678999, tzinfo=UTC),
    timeout=1.0,
    dispatch_id=17,
    lease_token="lease-7Kq2",  # the completion's, never a header (the exact set below)
    fencing_sent=FencingStatus.NOT_REQUESTED,
)


def test_headers_are_exactly_the_reserved_set_with_invocation_values() -> None:
    assert encode_request_headers(BASE) == {
        "Idempotency-Key": "k" * 64,
        "X-Effectus-Request-ID": "r-1",
        "X-Effectus-Execution-ID": "order-7",
        "X-Effectus-Saga-ID": "s" * 64,
        "X-Effectus-Effect-ID": "charge",
        "X-Effectus-Attempt": "1",
        "X-Effectus-Direction": "compensation",
        "X-Effectus-Verb": "payments.refund",
        "X-Effectus-Argument-Hash": "a" * 64,
        "X-Effectus-Contract-Hash": "c" * 64,
        "X-Effectus-Fencing-Grants": "[]",
        "X-Effectus-Deadline": "2030-01-02T03:04:05.000Z",
        "X-Effectus-Key-Issued-At": "2030-01-01T03:04:05.678Z",  # truncated, never rounded up
    }


def test_a_key_without_an_issue_time_sends_no_issued_at_header() -> None:
    sent = encode_request_headers(dataclasses.replace(BASE, key_issued_at=None))
    assert "X-Effectus-Key-Issued-At" not in sent


def test_a_naive_issue_time_is_refused_naming_its_header() -> None:
    naive = dataclasses.replace(BASE, key_issued_at=datetime(2030, 1, 1))
    with pytest.raises(WireError, match="X-Effectus-Key-Issued-At: must be timezone-aware"):
        encode_request_headers(naive)


def test_fencing_grants_are_canonical_json_sorted_by_resource() -> None:
    grants = (FencingGrant("z:1", 3), FencingGrant("a:9", 2**40))
    inv = dataclasses.replace(BASE, fencing_grants=grants)
    assert encode_request_headers(inv)["X-Effectus-Fencing-Grants"] == (
        '[{"resource":"a:9","token":1099511627776},{"resource":"z:1","token":3}]'
    )


def test_duplicate_fencing_resource_is_refused() -> None:
    grants = (FencingGrant("a", 1), FencingGrant("a", 2))
    with pytest.raises(WireError, match="duplicate"):
        encode_request_headers(dataclasses.replace(BASE, fencing_grants=grants))


def test_deadline_is_converted_to_utc_and_truncated_to_milliseconds() -> None:
    plus_two = timezone(timedelta(hours=2))
    deadline = datetime(2030, 1, 2, 5, 4, 5, 999999, tzinfo=plus_two)
    assert format_deadline(deadline) == "2030-01-02T03:04:05.999Z"


def test_naive_deadline_is_refused() -> None:
    with pytest.raises(WireError, match="timezone-aware"):
        format_deadline(datetime(2030, 1, 2))


def test_control_characters_are_refused_and_the_value_is_not_echoed() -> None:
    inv = dataclasses.replace(BASE, execution_id="order-7\r\nX-Evil: yes")
    with pytest.raises(WireError) as raised:
        encode_request_headers(inv)
    assert "X-Effectus-Execution-ID" in str(raised.value)
    assert "Evil" not in str(raised.value)


def test_attempt_zero_is_refused() -> None:
    with pytest.raises(WireError, match="Attempt"):
        encode_request_headers(dataclasses.replace(BASE, attempt=0))

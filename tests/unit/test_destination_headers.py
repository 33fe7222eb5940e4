"""parse_request is pure: reserved headers and body in, a verified request or a ProtocolError
that names the header out. Headers are built by ``core.wire.encode_request_headers``, as the
executors build them, so the client and the kit are held to one wire format."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from effectusd.core.canonical import canonical_bytes, sha256_hex
from effectusd.core.states import Direction, FencingStatus, OutcomeClass
from effectusd.core.wire import REQUEST_HEADERS, encode_request_headers
from effectusd.destination import (
    EffectusRequest,
    FencingGrant,
    PermanentFailure,
    ProtocolError,
    RetryableFailure,
    parse_request,
)
from effectusd.executors import protocol as executor_protocol

ARGS = {"order": "o-1", "currency": "EUR", "amount": 1250, "card": "4111-secret"}
BODY = canonical_bytes(ARGS)
INVOCATION = executor_protocol.Invocation(
    request_id="req-1",
    execution_id="order-7",
    saga_id="53c4d5234ab09a8d5912898c4e385b0a86809796ccca87c3959d7755085345f8",
    effect_id="charge",
    attempt=2,
    direction=Direction.FORWARD,
    verb="payments.charge",
    method="POST",
    path="/payments/charge",
    body=BODY,
    argument_hash=sha256_hex(BODY),
    contract_hash="ab" * 32,
    idempotency_key="8574e6019624ecdc867c223762cb0e8f2f1bca2924d07b3563fd0c977bbbab6e",
    fencing_grants=(
        executor_protocol.FencingGrant("account:b", 9),
        executor_protocol.FencingGrant("account:a", 12),
    ),
    deadline=datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=UTC),
    key_issued_at=datetime(2030, 1, 1, 3, 4, 5, 678000, tzinfo=UTC),
    timeout=5.0,
    dispatch_id=17,
    lease_token="lease-7Kq2",
    fencing_sent=FencingStatus.PROPAGATED,
)


def headers(**changes: str | None) -> dict[str, str]:
    """The executor's headers for INVOCATION; a keyword (dashes as underscores) replaces or,
    with None, removes one."""
    result = encode_request_headers(INVOCATION)
    for field, value in changes.items():
        name = next(n for n in result if n.lower().replace("-", "_") == field.lower())
        if value is None:
            del result[name]
        else:
            result[name] = value
    return result


def refused(headers: object, body: bytes = BODY) -> ProtocolError:
    with pytest.raises(ProtocolError) as caught:
        parse_request(headers, body)  # type: ignore[arg-type]
    return caught.value


# --- what a valid request parses to --------------------------------------------------------


def test_executor_headers_parse_to_the_invocation_identity() -> None:
    request = parse_request(headers(), BODY)
    assert request == EffectusRequest(
        idempotency_key=INVOCATION.idempotency_key,
        request_id="req-1",
        execution_id="order-7",
        saga_id=INVOCATION.saga_id,
        effect_id="charge",
        attempt=2,
        direction=Direction.FORWARD,
        verb="payments.charge",
        argument_hash=INVOCATION.argument_hash,
        contract_hash="ab" * 32,
        fencing_grants=(FencingGrant("account:a", 12), FencingGrant("account:b", 9)),
        deadline=datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=UTC),
        key_issued_at=datetime(2030, 1, 1, 3, 4, 5, 678000, tzinfo=UTC),
        body=BODY,
        arguments=ARGS,
    )


def test_header_names_match_without_regard_to_case() -> None:
    lowered = {name.lower(): value for name, value in headers().items()}
    shouted = {name.upper(): value for name, value in headers().items()}
    assert (
        parse_request(lowered, BODY)
        == parse_request(shouted, BODY)
        == parse_request(headers(), BODY)
    )


def test_raw_byte_pairs_are_decoded_as_utf8() -> None:
    inv = dataclasses.replace(
        INVOCATION, fencing_grants=(executor_protocol.FencingGrant("account:müller", 1),)
    )
    raw = [(n.lower().encode(), v.encode("utf-8")) for n, v in encode_request_headers(inv).items()]
    request = parse_request(raw, BODY)
    assert request.fencing_grants == (FencingGrant("account:müller", 1),)


def test_unrelated_headers_are_ignored_even_when_undecodable() -> None:
    raw = [(n.encode(), v.encode()) for n, v in headers().items()]
    raw.append((b"x-other", b"\xff\xfe"))
    assert parse_request(raw, BODY).attempt == 2


def test_no_fencing_grants_is_an_empty_tuple() -> None:
    assert parse_request(headers(x_effectus_fencing_grants="[]"), BODY).fencing_grants == ()


def test_compensation_direction_is_parsed() -> None:
    request = parse_request(headers(x_effectus_direction="compensation"), BODY)
    assert request.direction is Direction.COMPENSATION


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2030-01-02T03:04:05Z", datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2030-01-02t03:04:05.5z", datetime(2030, 1, 2, 3, 4, 5, 500000, tzinfo=UTC)),
        (
            "2030-01-02T05:04:05.123456789+02:00",
            datetime(2030, 1, 2, 5, 4, 5, 123456, tzinfo=timezone(timedelta(hours=2))),
        ),
    ],
)
def test_rfc3339_deadlines_in_any_offset_and_precision_are_accepted(
    text: str, expected: datetime
) -> None:
    assert parse_request(headers(x_effectus_deadline=text), BODY).deadline == expected


def test_a_request_without_a_key_issue_time_parses_as_from_an_older_daemon() -> None:
    request = parse_request(headers(x_effectus_key_issued_at=None), BODY)
    assert request.key_issued_at is None
    assert request.deadline == INVOCATION.deadline


def test_the_key_issue_time_is_parsed_in_any_offset() -> None:
    request = parse_request(headers(x_effectus_key_issued_at="2030-01-01T05:04:05.678+02:00"), BODY)
    assert request.key_issued_at == datetime(2030, 1, 1, 3, 4, 5, 678000, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("yesterday", "expected an RFC 3339 timestamp with an offset"),
        ("2030-01-01T03:04:05", "expected an RFC 3339 timestamp with an offset"),
        ("2030-02-30T03:04:05Z", "is not a valid date and time"),
        ("  ", "empty"),
    ],
)
def test_an_unusable_key_issue_time_is_refused_by_name(value: str, reason: str) -> None:
    error = refused(headers(x_effectus_key_issued_at=value))
    assert (error.header, error.reason) == ("X-Effectus-Key-Issued-At", reason)
    assert value.strip() == "" or value not in str(error)


def test_a_key_issue_time_sent_twice_is_refused() -> None:
    pairs = [*headers().items(), ("x-effectus-key-issued-at", "2030-01-01T00:00:00Z")]
    error = refused(pairs)
    assert (error.header, error.reason) == ("X-Effectus-Key-Issued-At", "sent more than once")


# --- refusals name the header ---------------------------------------------------------------


@pytest.mark.parametrize("name", REQUEST_HEADERS)
def test_each_missing_reserved_header_is_refused_by_name(name: str) -> None:
    error = refused({k: v for k, v in headers().items() if k != name})
    assert (error.header, error.reason) == (name, "missing")


@pytest.mark.parametrize("name", REQUEST_HEADERS)
def test_each_empty_reserved_header_is_refused_by_name(name: str) -> None:
    error = refused({**headers(), name: "  "})
    assert (error.header, error.reason) == (name, "empty")


def test_a_reserved_header_sent_twice_is_refused() -> None:
    pairs = [*headers().items(), ("x-effectus-attempt", "3")]
    assert refused(pairs).header == "X-Effectus-Attempt"


def test_a_header_value_that_is_not_utf8_is_refused_by_name() -> None:
    raw = [(n.encode(), v.encode()) for n, v in headers().items() if n != "X-Effectus-Verb"]
    raw.append((b"X-Effectus-Verb", b"pay\xffments"))
    error = refused(raw)
    assert (error.header, error.reason) == ("X-Effectus-Verb", "is not valid UTF-8")


@pytest.mark.parametrize(
    "name",
    [
        "Idempotency-Key",
        "X-Effectus-Saga-ID",
        "X-Effectus-Argument-Hash",
        "X-Effectus-Contract-Hash",
    ],
)
@pytest.mark.parametrize("value", ["ab" * 31, "AB" * 32, "g" * 64, "ab" * 33])
def test_hash_headers_must_be_64_lowercase_hex(name: str, value: str) -> None:
    assert refused({**headers(), name: value}).header == name


@pytest.mark.parametrize("value", ["0", "-1", "01", "1.0", "+1", "one", "1" * 19])
def test_attempt_must_be_a_positive_decimal_integer(value: str) -> None:
    assert refused(headers(x_effectus_attempt=value)).header == "X-Effectus-Attempt"


@pytest.mark.parametrize("value", ["Forward", "backward", "compensate"])
def test_direction_must_be_forward_or_compensation(value: str) -> None:
    assert refused(headers(x_effectus_direction=value)).header == "X-Effectus-Direction"


@pytest.mark.parametrize(
    "value",
    [
        "not json",
        '{"resource":"a","token":1}',
        '[{"resource":"a"}]',
        '[{"resource":"a","token":1,"extra":0}]',
        '[{"resource":"","token":1}]',
        '[{"resource":7,"token":1}]',
        '[{"resource":"a","token":-1}]',
        '[{"resource":"a","token":true}]',
        '[{"resource":"a","token":1.5}]',
        '[{"resource":"a","token":9007199254740992}]',
        '[{"resource":"b","token":1},{"resource":"a","token":1}]',
        '[{"resource":"a","token":1},{"resource":"a","token":2}]',
        '[{"token":1,"resource":"a"}]',
        '[{"resource": "a", "token": 1}]',
        '[{"resource":"\\u0061","token":1}]',
        '[{"resource":"\\ud800","token":1}]',
    ],
)
def test_fencing_grants_must_be_the_canonical_sorted_array(value: str) -> None:
    assert refused(headers(x_effectus_fencing_grants=value)).header == "X-Effectus-Fencing-Grants"


@pytest.mark.parametrize(
    "value",
    [
        "2030-01-02T03:04:05",  # no offset
        "2030-01-02 03:04:05Z",
        "2030-01-02",
        "2030-W01-2T03:04:05Z",
        "20300102T030405Z",
        "2030-13-02T03:04:05Z",
        "2030-01-02T03:04:60Z",
        "tomorrow",
    ],
)
def test_deadline_must_be_rfc3339_with_an_offset(value: str) -> None:
    assert refused(headers(x_effectus_deadline=value)).header == "X-Effectus-Deadline"


def test_a_control_character_in_a_header_is_refused() -> None:
    error = refused(headers(x_effectus_verb="pay\x00ments"))
    assert error.header == "X-Effectus-Verb"


# --- the body ------------------------------------------------------------------------------


def test_a_body_that_does_not_match_the_argument_hash_is_refused() -> None:
    tampered = canonical_bytes({**ARGS, "amount": 99999})
    error = refused(headers(), tampered)
    assert error.header == "X-Effectus-Argument-Hash"


def test_a_body_that_is_not_json_is_refused_even_with_a_matching_hash() -> None:
    body = b"amount=1250"
    error = refused(headers(x_effectus_argument_hash=sha256_hex(body)), body)
    assert (error.header, error.reason) == ("body", "is not JSON")


@pytest.mark.parametrize("body", [b"", b'{"a":1,"a":2}', b'{"a":NaN}', b"\xff"])
def test_bodies_strict_json_refuses_are_refused(body: bytes) -> None:
    assert refused(headers(x_effectus_argument_hash=sha256_hex(body)), body).header == "body"


# --- what a refusal answers -----------------------------------------------------------------


def test_protocol_error_answers_400_permanent_failure_naming_the_header_not_the_values() -> None:
    reply = refused(headers(x_effectus_fencing_grants='[{"resource":"card:4111-secret"}]')).reply()
    assert reply.status == 400
    assert reply.outcome is OutcomeClass.PERMANENT
    assert reply.headers == {
        "Content-Type": "application/json",
        "X-Effectus-Outcome": "permanent_failure",
    }
    message = json.loads(reply.body)["error"]
    assert message.startswith("X-Effectus-Fencing-Grants: ")
    assert "secret" not in message


def test_argument_hash_refusal_does_not_echo_the_body() -> None:
    tampered = canonical_bytes({**ARGS, "card": "4111-other-secret"})
    reply = refused(headers(), tampered).reply()
    assert b"secret" not in reply.body and b"4111" not in reply.body


# --- failures a mutation raises -------------------------------------------------------------


def test_permanent_failure_reply_carries_its_status_body_and_acknowledgement() -> None:
    reply = PermanentFailure("declined", status=402).reply(acknowledged=True)
    assert (reply.status, json.loads(reply.body)) == (402, {"error": "declined"})
    assert reply.headers == {
        "Content-Type": "application/json",
        "X-Effectus-Outcome": "permanent_failure",
        "X-Effectus-Fencing": "acknowledged",
    }


@pytest.mark.parametrize("status", [200, 302, 399, 600])
def test_permanent_failure_refuses_a_status_that_is_not_an_error(status: int) -> None:
    with pytest.raises(ValueError):
        PermanentFailure("x", status=status)


def test_retryable_failure_answers_503_with_retry_after() -> None:
    reply = RetryableFailure("ledger busy", retry_after=7).reply(acknowledged=False)
    assert reply.status == 503
    assert reply.headers == {
        "Content-Type": "application/json",
        "X-Effectus-Outcome": "retryable_failure_known_not_committed",
        "Retry-After": "7",
    }

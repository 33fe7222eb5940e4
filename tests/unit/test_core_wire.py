"""The wire contract holds both ends to one format: what the executors encode, the destination
kit decodes to the same identity, and a kit's reply classifies as the outcome it names."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from effectusd.config import DestinationConfig
from effectusd.core import wire
from effectusd.core.canonical import canonical_text, sha256_hex
from effectusd.core.states import Direction, FencingStatus, OutcomeClass
from effectusd.core.wire import FencingGrant, RequestIdentity, WireError, WireProblem
from effectusd.destination import EffectusRequest, RetryableFailure, parse_request
from effectusd.destination.replies import Reply
from effectusd.executors.classify import Wire, classify
from effectusd.executors.protocol import Invocation

# Header values as HTTP carries them: no control characters, no surrounding whitespace.
TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=40
).filter(lambda value: value == value.strip())
HEX64 = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
GRANT = st.builds(
    FencingGrant,
    # JSON escapes every control character but DEL, which the encoder refuses (tested below).
    resource=st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x7f"),
        min_size=1,
    ),
    token=st.integers(0, wire.MAX_TOKEN),
)
GRANTS = st.lists(GRANT, max_size=5, unique_by=lambda grant: grant.resource)
# The wire carries milliseconds in UTC; encoding truncates, so only those round-trip (aware
# datetimes compare as instants, so any offset does).
OFFSET = st.integers(-23 * 60 - 59, 23 * 60 + 59).map(lambda m: timezone(timedelta(minutes=m)))
DEADLINE = st.datetimes(
    min_value=datetime(1971, 1, 1), max_value=datetime(9998, 12, 31), timezones=OFFSET
).map(lambda moment: moment.replace(microsecond=moment.microsecond // 1000 * 1000))
IDENTITY = st.builds(
    RequestIdentity,
    idempotency_key=HEX64,
    request_id=TEXT,
    execution_id=TEXT,
    saga_id=HEX64,
    effect_id=TEXT,
    attempt=st.integers(1, 10**18 - 1),
    direction=st.sampled_from(Direction),
    verb=TEXT,
    argument_hash=HEX64,
    contract_hash=HEX64,
    fencing_grants=GRANTS.map(lambda grants: tuple(sorted(grants, key=lambda g: g.resource))),
    deadline=DEADLINE,
    key_issued_at=st.none() | DEADLINE,
)


@given(IDENTITY)
def test_decoding_the_encoded_headers_gives_back_the_identity(identity: RequestIdentity) -> None:
    assert wire.decode_request_headers(wire.encode_request_headers(identity)) == identity


LEASE_TOKEN = "lease-never-on-the-wire"

ARGUMENTS = st.dictionaries(st.text(max_size=5), st.integers(-(2**53) + 1, 2**53 - 1), max_size=3)


@given(IDENTITY, ARGUMENTS)
def test_the_kit_accepts_what_the_executor_sends(
    identity: RequestIdentity, arguments: dict[str, int]
) -> None:
    body = canonical_text(arguments).encode()
    fields = {f.name: getattr(identity, f.name) for f in dataclasses.fields(identity)}
    invocation = Invocation(
        **{**fields, "argument_hash": sha256_hex(body)},
        method="POST",
        path="/",
        body=body,
        timeout=1.0,
        dispatch_id=1,
        lease_token=LEASE_TOKEN,
        fencing_sent=FencingStatus.PROPAGATED,
    )
    sent = wire.encode_request_headers(invocation)
    assert LEASE_TOKEN not in repr(sent)
    # As an ASGI server hands them over: lowercased names, raw UTF-8 bytes.
    raw = [(name.lower().encode(), value.encode("utf-8")) for name, value in sent.items()]
    expected = EffectusRequest(
        **{**fields, "argument_hash": sha256_hex(body)}, body=body, arguments=arguments
    )
    assert parse_request(sent, body) == expected
    assert parse_request(raw, body) == expected


@given(GRANTS, st.randoms())
def test_grants_round_trip_sorted_whatever_order_they_come_in(
    grants: list[FencingGrant], random: Any
) -> None:
    shuffled = list(grants)
    random.shuffle(shuffled)
    encoded = wire.encode_fencing_grants(shuffled)
    assert wire.decode_fencing_grants(encoded) == tuple(sorted(grants, key=lambda g: g.resource))


@given(
    st.none() | st.sampled_from(OutcomeClass),
    st.booleans(),
    st.none() | st.integers(0, 10**9),
    st.none() | TEXT,
)
def test_reply_headers_decode_to_what_was_encoded(
    outcome: OutcomeClass | None,
    acknowledged: bool,
    retry_after: int | None,
    request_id: str | None,
) -> None:
    headers = wire.encode_reply_headers(
        outcome=outcome,
        fencing_acknowledged=acknowledged,
        retry_after=retry_after,
        request_id=request_id,
    )
    assert wire.decode_outcome(headers.get(wire.OUTCOME)) == outcome
    assert wire.decode_fencing(headers.get(wire.FENCING)) is acknowledged
    assert (wire.RETRY_AFTER in headers) is (retry_after is not None)
    if retry_after is not None:
        assert wire.is_retry_after(headers[wire.RETRY_AFTER])
    if request_id is not None:
        assert wire.echo_matches(headers[wire.REQUEST_ID], request_id)
        assert not wire.echo_matches(headers[wire.REQUEST_ID], request_id + "x")


class _AnsweredWire(Wire):
    """A transport's record of an answer that arrived; which connection carried it is moot."""

    @property
    def connection(self) -> str | None:
        return None


def _fenced_invocation(request_id: str) -> Invocation:
    """An attempt sent with a durable fencing grant, so its completion says if it was
    acknowledged."""
    return Invocation(
        idempotency_key="a" * 64,
        request_id=request_id,
        execution_id="order-7",
        saga_id="b" * 64,
        effect_id="charge",
        attempt=1,
        direction=Direction.FORWARD,
        verb="payments.charge",
        argument_hash="c" * 64,
        contract_hash="d" * 64,
        fencing_grants=(FencingGrant("account:a", 1),),
        deadline=datetime(2030, 1, 1, tzinfo=UTC),
        key_issued_at=datetime(2030, 1, 1, tzinfo=UTC),
        method="POST",
        path="/",
        body=b"{}",
        timeout=1.0,
        dispatch_id=1,
        lease_token=LEASE_TOKEN,
        fencing_sent=FencingStatus.PROPAGATED,
    )


async def _classified(reply: Reply, request_id: str) -> tuple[OutcomeClass, bool]:
    answered = _AnsweredWire(_fenced_invocation(request_id))
    answered.answered(reply.status, reply.headers)

    async def read_body(limit: int) -> bytes:
        return reply.body

    config = DestinationConfig(base_url="http://127.0.0.1:1")
    result = await classify(
        answered,
        0.0,
        reply.headers,
        read_body,
        status_map=config.status_map,
        max_response_bytes=config.max_response_bytes,
    )
    return result.outcome, result.fencing_status is FencingStatus.ACKNOWLEDGED


@pytest.mark.parametrize("acknowledged", [False, True])
async def test_the_executor_reads_a_kit_reply_as_the_outcome_it_names(acknowledged: bool) -> None:
    replies = [
        Reply(200, b"{}", None, acknowledged, request_id="r-1"),
        Reply(409, b"{}", OutcomeClass.PERMANENT, acknowledged, request_id="r-1"),
        Reply(400, b"{}", OutcomeClass.UNKNOWN, acknowledged, request_id="r-1"),
        RetryableFailure("later", retry_after=3).reply(acknowledged=acknowledged),
    ]
    expected = [OutcomeClass.SUCCESS, OutcomeClass.PERMANENT, OutcomeClass.UNKNOWN]
    expected.append(OutcomeClass.RETRYABLE)
    for reply, outcome in zip(replies, expected, strict=True):
        assert await _classified(reply, "r-1") == (outcome, acknowledged)
    # The same answer echoing another request's ID is not this request's answer.
    assert (await _classified(replies[0], "r-2"))[0] is OutcomeClass.UNKNOWN


# --- fixed vectors ---------------------------------------------------------------------------


def test_header_names_are_fixed() -> None:
    assert wire.REQUEST_HEADERS == (
        "Idempotency-Key",
        "X-Effectus-Request-ID",
        "X-Effectus-Execution-ID",
        "X-Effectus-Saga-ID",
        "X-Effectus-Effect-ID",
        "X-Effectus-Attempt",
        "X-Effectus-Direction",
        "X-Effectus-Verb",
        "X-Effectus-Argument-Hash",
        "X-Effectus-Contract-Hash",
        "X-Effectus-Fencing-Grants",
        "X-Effectus-Deadline",
    )
    assert wire.KEY_ISSUED_AT == "X-Effectus-Key-Issued-At"  # optional, so not among them
    assert wire.REPLY_HEADERS == ("X-Effectus-Outcome", "X-Effectus-Fencing", "Retry-After")


def test_grants_json_for_a_fixed_input() -> None:
    grants = [FencingGrant("z", 3), FencingGrant("account:müller", 2**53 - 1)]
    assert wire.encode_fencing_grants(grants) == (
        '[{"resource":"account:müller","token":9007199254740991},{"resource":"z","token":3}]'
    )
    assert wire.encode_fencing_grants([]) == "[]"


def test_reply_headers_for_a_fixed_reply() -> None:
    headers = wire.encode_reply_headers(
        outcome=OutcomeClass.RETRYABLE, fencing_acknowledged=True, retry_after=7, request_id="r-9"
    )
    assert headers == {
        "X-Effectus-Outcome": "retryable_failure_known_not_committed",
        "X-Effectus-Fencing": "acknowledged",
        "Retry-After": "7",
        "X-Effectus-Request-ID": "r-9",
    }


def test_decoding_lists_every_problem_by_header_and_never_the_value() -> None:
    identity = RequestIdentity(
        "k" * 64, "r", "e", "s" * 64, "f", 1, Direction.FORWARD, "v", "a" * 64, "c" * 64, (),
        datetime(2030, 1, 1, tzinfo=UTC), None,
    )  # fmt: skip
    headers = wire.encode_request_headers(identity)
    del headers[wire.SAGA_ID]
    headers[wire.ATTEMPT] = "0secret"
    headers[wire.FENCING_GRANTS] = '[{"resource":"secret","token":-1}]'
    problems = wire.decode_request_headers(headers)
    assert isinstance(problems, list)
    assert problems == [
        WireProblem(wire.SAGA_ID, "missing"),
        WireProblem(wire.IDEMPOTENCY_KEY, "expected 64 lowercase hex digits"),
        WireProblem(wire.ATTEMPT, "expected a positive decimal integer"),
        WireProblem(wire.FENCING_GRANTS, "element 0: token must be an integer 0..2^53-1"),
    ]
    assert not any("secret" in problem.reason for problem in problems)


def test_a_value_that_could_forge_a_header_is_refused_by_name() -> None:
    identity = RequestIdentity(
        "k" * 64, "r", "order\r\nX-Evil: yes", "s" * 64, "f", 1, Direction.FORWARD, "v",
        "a" * 64, "c" * 64, (), datetime(2030, 1, 1, tzinfo=UTC), None,
    )  # fmt: skip
    with pytest.raises(WireError) as raised:
        wire.encode_request_headers(identity)
    assert raised.value.header == wire.EXECUTION_ID
    assert "Evil" not in str(raised.value)


def test_of_two_values_that_could_forge_a_header_the_first_sent_is_named() -> None:
    identity = RequestIdentity(
        "k" * 64, "r", "e", "s" * 64, "step\nX-Evil: 1", 1, Direction.FORWARD, "verb\r",
        "a" * 64, "c" * 64, (), datetime(2030, 1, 1, tzinfo=UTC), None,
    )  # fmt: skip
    with pytest.raises(WireError) as raised:
        wire.encode_request_headers(identity)
    assert raised.value.header == wire.EFFECT_ID  # sent before X-Effectus-Verb


def test_an_unfenced_attempt_sends_an_empty_canonical_grant_list() -> None:
    identity = RequestIdentity(
        "k" * 64, "r", "e", "s" * 64, "f", 1, Direction.FORWARD, "v", "a" * 64, "c" * 64, (),
        datetime(2030, 1, 1, tzinfo=UTC), None,
    )  # fmt: skip
    assert wire.encode_request_headers(identity)[wire.FENCING_GRANTS] == "[]"
    assert wire.encode_fencing_grants([]) == wire.encode_fencing_grants(()) == "[]"
    assert wire.decode_fencing_grants("[]") == ()


def test_a_fencing_resource_json_cannot_escape_is_refused_by_name() -> None:
    identity = RequestIdentity(
        "k" * 64, "r", "e", "s" * 64, "f", 1, Direction.FORWARD, "v", "a" * 64, "c" * 64,
        (FencingGrant("account\x7fsecret", 1),), datetime(2030, 1, 1, tzinfo=UTC), None,
    )  # fmt: skip
    with pytest.raises(WireError) as raised:
        wire.encode_request_headers(identity)
    assert raised.value.header == wire.FENCING_GRANTS
    assert "secret" not in str(raised.value)


def test_static_config_cannot_claim_an_engine_header() -> None:
    for name in (*wire.REQUEST_HEADERS, "x-effectus-anything", "Content-Type", " host "):
        assert wire.is_reserved_header(name), name
    assert not wire.is_reserved_header("X-Tenant")


@given(st.text(max_size=80))
def test_has_control_finds_exactly_the_ascii_control_characters(value: str) -> None:
    """The printable fast path answers as the full search would, for any text (unprintable
    non-ASCII characters such as U+2028 are not control characters here)."""
    expected = any(ord(char) < 0x20 or ord(char) == 0x7F for char in value)
    assert wire.has_control(value) is expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("plain", False),
        ("café \u2028 \u00a0", False),
        ("a\r\nX-Forged: 1", True),
        ("tab\there", True),
        ("del\x7f", True),
        ("nul\x00", True),
    ],
)
def test_has_control_examples(value: str, expected: bool) -> None:
    assert wire.has_control(value) is expected


def test_a_sent_time_is_utc_with_milliseconds_truncated_and_a_naive_one_is_refused() -> None:
    # Never rounded up: the destination is not promised time the daemon does not have.
    late = datetime(2026, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    assert wire.format_deadline(late) == "2026-12-31T23:59:59.999Z"
    east = datetime(2027, 1, 1, 1, 0, 0, 5000, tzinfo=timezone(timedelta(hours=1, minutes=30)))
    assert wire.format_time(east, wire.KEY_ISSUED_AT) == "2026-12-31T23:30:00.005Z"
    early = datetime(999, 1, 2, 3, 4, 5, tzinfo=UTC)  # isoformat's four-digit year
    assert wire.format_deadline(early) == early.isoformat(timespec="milliseconds")[:-6] + "Z"
    with pytest.raises(wire.WireError) as refused:
        wire.format_time(datetime(2026, 1, 1), wire.KEY_ISSUED_AT)
    assert refused.value.header == wire.KEY_ISSUED_AT


NOW = datetime(2026, 12, 6, 3, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", 120.0),
        (" 0 ", 0.0),
        ("Sun, 06 Dec 2026 03:00:30 GMT", 30.0),  # an HTTP-date, from when the answer came
        ("Sun, 06 Dec 2026 02:59:00 GMT", 0.0),  # already past: no wait
        ("Mon, 31 Feb 2026 03:00:30 GMT", None),  # the form of a date, but no real one
        ("-5", None),
        ("soon", None),
        ("1.5", None),
    ],
)
def test_retry_after_is_read_as_seconds_or_an_http_date(value: str, expected: float | None) -> None:
    assert wire.retry_after_seconds(value, NOW) == expected

"""The wire contract between effectusd's executors and a destination: every reserved header
name, and how each side writes and reads them.

The executors encode with this module and the destination kit decodes with it, so what one
sends the other accepts by construction (tests/unit/test_core_wire.py pins both directions).
Errors name the header and the rule it broke, never the value: values (fencing resources,
execution IDs) can carry argument data.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import pairwise

from effectusd.core.canonical import CanonicalJSONError, canonical_text, parse_json
from effectusd.core.frozen import frozen
from effectusd.core.states import Direction, OutcomeClass

# --- request headers: the engine's identity for one attempt ----------------------------------

IDEMPOTENCY_KEY = "Idempotency-Key"
REQUEST_ID = "X-Effectus-Request-ID"  # one per attempt; the destination echoes it back
EXECUTION_ID = "X-Effectus-Execution-ID"
SAGA_ID = "X-Effectus-Saga-ID"
EFFECT_ID = "X-Effectus-Effect-ID"
ATTEMPT = "X-Effectus-Attempt"
DIRECTION = "X-Effectus-Direction"
VERB = "X-Effectus-Verb"
ARGUMENT_HASH = "X-Effectus-Argument-Hash"
CONTRACT_HASH = "X-Effectus-Contract-Hash"
FENCING_GRANTS = "X-Effectus-Fencing-Grants"
DEADLINE = "X-Effectus-Deadline"
REQUEST_HEADERS = (
    IDEMPOTENCY_KEY, REQUEST_ID, EXECUTION_ID, SAGA_ID, EFFECT_ID, ATTEMPT, DIRECTION, VERB,
    ARGUMENT_HASH, CONTRACT_HASH, FENCING_GRANTS, DEADLINE,
)  # fmt: skip
# When the key was first issued (the dispatch's enqueue, the daemon's database clock): the same
# for every attempt. Optional on arrival, so a request from a daemon that predates it is as
# valid as before; a destination that prunes its dedupe records compares it with its retention.
KEY_ISSUED_AT = "X-Effectus-Key-Issued-At"

# W3C trace context of the attempt's span, sent only while tracing is on (docs/operations.md
# "Tracing"); never part of the identity, so a request without them is as valid as before.
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
TRACE_HEADERS = (TRACEPARENT, TRACESTATE)

# --- reply headers --------------------------------------------------------------------------

OUTCOME = "X-Effectus-Outcome"
FENCING = "X-Effectus-Fencing"
FENCING_ACKNOWLEDGED = "acknowledged"
RETRY_AFTER = "Retry-After"
REPLY_HEADERS = (OUTCOME, FENCING, RETRY_AFTER)  # REQUEST_ID is echoed too, checked apart

# Headers a destination's static config must not set: the engine or the transport owns them.
# The trace context too: a fixed one would make every call claim the same parent span.
RESERVED_PREFIX = "x-effectus-"
ENGINE_OWNED = frozenset(
    {"idempotency-key", "content-type", "content-length", "host", *TRACE_HEADERS}
)

MAX_TOKEN = 2**53 - 1  # the canonical JSON integer limit fencing tokens are written under

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110 token: header names, methods
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_ATTEMPT = re.compile(r"[1-9][0-9]{0,17}")  # the executor's str(int); 18 digits fit a bigint
_RFC3339 = re.compile(
    r"(\d{4}-\d{2}-\d{2})[Tt](\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})"
)
# Retry-After as RFC 9110 allows it: delay seconds, or an IMF-fixdate.
_RETRY_AFTER = re.compile(
    r"[0-9]{1,10}|[A-Z][a-z]{2}, [0-9]{2} [A-Z][a-z]{2} [0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2} GMT"
)
_OUTCOME_VALUES = frozenset(outcome.value for outcome in OutcomeClass)

HeaderSource = Mapping[str, str] | Iterable[tuple[str | bytes, str | bytes]]


class WireError(ValueError):
    """A value that cannot be put on the wire, or a header that breaks the contract."""

    def __init__(self, header: str, reason: str) -> None:
        self.header = header
        self.reason = reason
        super().__init__(f"{header}: {reason}")


@dataclass(frozen=True, slots=True)
class WireProblem:
    header: str
    reason: str


@dataclass(frozen=True, slots=True)
class FencingGrant:
    resource: str
    token: int


@frozen
class RequestIdentity:
    """One attempt's identity, as the reserved request headers carry it: the executor's
    Invocation is one with what to send, the destination kit's EffectusRequest one with what
    arrived."""

    idempotency_key: str
    request_id: str
    execution_id: str
    saga_id: str
    effect_id: str
    attempt: int
    direction: Direction
    verb: str
    argument_hash: str
    contract_hash: str
    fencing_grants: tuple[FencingGrant, ...]  # sorted by resource, no resource twice
    deadline: datetime  # timezone-aware
    key_issued_at: datetime | None  # timezone-aware; None only from a daemon that predates it


def is_token(value: str) -> bool:
    """An RFC 9110 token, as header names and methods must be."""
    return _TOKEN.fullmatch(value) is not None


def has_control(value: str) -> bool:
    """A CR or LF would let a value forge further headers: callers reject, never escape.
    Every control character is unprintable, so a printable text (str.isprintable, a tenth of
    the search's time on a request's headers) needs no search."""
    return not value.isprintable() and _CONTROL.search(value) is not None


def is_hex64(value: str) -> bool:
    """64 lowercase hex digits: an idempotency key, a saga ID, a hash."""
    return _HEX64.fullmatch(value) is not None


def is_reserved_header(name: str) -> bool:
    lowered = name.strip().lower()
    return lowered in ENGINE_OWNED or lowered.startswith(RESERVED_PREFIX)


# --- request: encode (executor side) --------------------------------------------------------


def encode_request_headers(identity: RequestIdentity) -> dict[str, str]:
    """The reserved headers for one attempt; they always win over config headers."""
    grants = encode_fencing_grants(identity.fencing_grants)
    if identity.attempt < 1:
        raise WireError(ATTEMPT, "attempts start at 1")
    headers = {
        IDEMPOTENCY_KEY: identity.idempotency_key,
        REQUEST_ID: identity.request_id,
        EXECUTION_ID: identity.execution_id,
        SAGA_ID: identity.saga_id,
        EFFECT_ID: identity.effect_id,
        ATTEMPT: str(identity.attempt),
        DIRECTION: str(identity.direction),
        VERB: identity.verb,
        ARGUMENT_HASH: identity.argument_hash,
        CONTRACT_HASH: identity.contract_hash,
        FENCING_GRANTS: grants,
        DEADLINE: format_deadline(identity.deadline),
    }
    if identity.key_issued_at is not None:
        headers[KEY_ISSUED_AT] = format_time(identity.key_issued_at, KEY_ISSUED_AT)
    if has_control("".join(headers.values())):  # one scan; only a refusal looks for where
        for name, value in headers.items():
            if has_control(value):
                raise WireError(name, "contains a control character")
    return headers


def encode_fencing_grants(grants: Iterable[FencingGrant]) -> str:
    """``[{"resource":…,"token":N}]`` sorted by resource, in canonical JSON."""
    if grants == ():
        return "[]"  # an unfenced attempt's, as canonical_text writes it
    ordered = sorted(grants, key=lambda grant: grant.resource)
    if any(first.resource == second.resource for first, second in pairwise(ordered)):
        raise WireError(FENCING_GRANTS, "duplicate resource")
    return canonical_text([{"resource": grant.resource, "token": grant.token} for grant in ordered])


# isoformat's layout (timespec milliseconds), written with %: a third of isoformat's work.
_RFC3339_MS = "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ"


def format_deadline(deadline: datetime) -> str:
    """RFC 3339 UTC with a Z and milliseconds."""
    return format_time(deadline, DEADLINE)


def format_time(moment: datetime, header: str) -> str:
    """``moment`` for ``header``: RFC 3339 UTC with a Z and milliseconds."""
    offset = moment.utcoffset()  # None when naive
    if offset is None:
        raise WireError(header, "must be timezone-aware")
    # Milliseconds truncated, never rounded up: the destination must not be promised time we
    # do not have, nor a key issued later than it was. A moment with a non-zero offset is moved
    # to UTC first (the database's timestamps come in its session's zone, UTC: no conversion).
    if offset:
        moment = moment.astimezone(UTC)
    return _RFC3339_MS % (
        moment.year,
        moment.month,
        moment.day,
        moment.hour,
        moment.minute,
        moment.second,
        moment.microsecond // 1000,
    )


# --- request: decode (destination side) -----------------------------------------------------


def decode_request_headers(headers: HeaderSource) -> RequestIdentity | list[WireProblem]:
    """The identity the reserved headers carry, or every problem found, each naming its header.

    ``headers`` is a mapping or a sequence of (name, value) pairs; names match without regard
    to case and byte values are decoded as UTF-8 (the executor sends UTF-8, e.g. a fencing
    resource like ``account:müller``). Presence problems come first, then format problems.
    """
    found = collect_headers(headers)
    problems: list[WireProblem] = []
    text: dict[str, str] = {}
    for name in REQUEST_HEADERS:
        value = read_header(found, name)
        if isinstance(value, WireProblem):
            problems.append(value)
        else:
            text[name] = value

    def check(name: str, ok: bool, reason: str) -> None:
        if name in text and not ok:
            problems.append(WireProblem(name, reason))
            del text[name]

    for name in (IDEMPOTENCY_KEY, SAGA_ID, ARGUMENT_HASH, CONTRACT_HASH):
        check(name, is_hex64(text.get(name, "")), "expected 64 lowercase hex digits")
    attempt = text.get(ATTEMPT, "")
    check(ATTEMPT, bool(_ATTEMPT.fullmatch(attempt)), "expected a positive decimal integer")
    check(DIRECTION, text.get(DIRECTION) in set(Direction), "expected forward or compensation")
    grants: tuple[FencingGrant, ...] = ()
    if FENCING_GRANTS in text:
        try:
            grants = decode_fencing_grants(text[FENCING_GRANTS])
        except WireError as exc:
            check(FENCING_GRANTS, False, exc.reason)
    deadline = None
    if DEADLINE in text:
        try:
            deadline = parse_deadline(text[DEADLINE])
        except WireError as exc:
            check(DEADLINE, False, exc.reason)
    key_issued_at = _key_issued_at(found, problems)
    if problems or deadline is None:
        return problems
    return RequestIdentity(
        idempotency_key=text[IDEMPOTENCY_KEY],
        request_id=text[REQUEST_ID],
        execution_id=text[EXECUTION_ID],
        saga_id=text[SAGA_ID],
        effect_id=text[EFFECT_ID],
        attempt=int(text[ATTEMPT]),
        direction=Direction(text[DIRECTION]),
        verb=text[VERB],
        argument_hash=text[ARGUMENT_HASH],
        contract_hash=text[CONTRACT_HASH],
        fencing_grants=grants,
        deadline=deadline,
        key_issued_at=key_issued_at,
    )


def _key_issued_at(
    found: dict[str, list[str | bytes]], problems: list[WireProblem]
) -> datetime | None:
    """``X-Effectus-Key-Issued-At``, optional (absent from a daemon that predates it); a
    malformed one is added to ``problems``."""
    issued = read_header(found, KEY_ISSUED_AT)
    if isinstance(issued, str):
        try:
            return parse_time(issued, KEY_ISSUED_AT)
        except WireError as exc:
            problems.append(WireProblem(KEY_ISSUED_AT, exc.reason))
    elif issued.reason != "missing":
        problems.append(issued)
    return None


def decode_fencing_grants(value: str) -> tuple[FencingGrant, ...]:
    """The canonical JSON array ``encode_fencing_grants`` writes; anything else is refused.

    Exact canonical form is required because two spellings of one grant list would be two
    different claims to compare, and only a broken or forged client sends a non-canonical one.
    """
    try:
        parsed = parse_json(value)
    except (ValueError, RecursionError):
        raise WireError(FENCING_GRANTS, "is not JSON") from None
    if not isinstance(parsed, list):
        raise WireError(FENCING_GRANTS, "expected a JSON array")
    grants = []
    for index, item in enumerate(parsed):
        where = f"element {index}"
        if not isinstance(item, dict) or set(item) != {"resource", "token"}:
            raise WireError(FENCING_GRANTS, f"{where} must have exactly resource and token")
        resource, token = item["resource"], item["token"]
        if not isinstance(resource, str) or not resource:
            raise WireError(FENCING_GRANTS, f"{where}: resource must be a non-empty string")
        # bool is an int subclass; JSON true must not pass as token 1.
        if type(token) is not int or not 0 <= token <= MAX_TOKEN:
            raise WireError(FENCING_GRANTS, f"{where}: token must be an integer 0..2^53-1")
        grants.append(FencingGrant(resource, token))
    resources = [grant.resource for grant in grants]
    if any(first >= second for first, second in pairwise(resources)):
        raise WireError(FENCING_GRANTS, "resources must be sorted and unique")
    try:
        canonical = canonical_text(parsed)
    except CanonicalJSONError:
        raise WireError(FENCING_GRANTS, "is not canonical JSON") from None
    if canonical != value:
        raise WireError(FENCING_GRANTS, "is not canonical JSON")
    return tuple(grants)


def parse_deadline(value: str) -> datetime:
    return parse_time(value, DEADLINE)


def parse_time(value: str, header: str) -> datetime:
    """An RFC 3339 timestamp with an offset, as ``header`` carries it."""
    # fromisoformat alone accepts many ISO 8601 forms RFC 3339 does not (no offset, week dates).
    match = _RFC3339.fullmatch(value)
    if match is None:
        raise WireError(header, "expected an RFC 3339 timestamp with an offset")
    date, time, fraction, offset = match.groups()
    # Microseconds are all Python keeps; nanoseconds are meaningless for a deadline anyway.
    micros = f".{fraction[:6].ljust(6, '0')}" if fraction else ""
    zone = "+00:00" if offset in "Zz" else offset
    whole = f"{date}T{time}{micros}{zone}"
    try:
        return datetime.fromisoformat(whole)
    except ValueError:
        raise WireError(header, "is not a valid date and time") from None


def collect_headers(headers: HeaderSource) -> dict[str, list[str | bytes]]:
    """Values by lowercased name, decoded lazily so a bad unrelated header never fails."""
    pairs: Iterable[tuple[str | bytes, str | bytes]] = (
        headers.items() if isinstance(headers, Mapping) else headers
    )
    found: dict[str, list[str | bytes]] = {}
    for raw_name, raw_value in pairs:
        # Names are ASCII tokens; latin-1 cannot fail, and a non-ASCII name matches nothing.
        name = raw_name.decode("latin-1") if isinstance(raw_name, bytes) else raw_name
        found.setdefault(name.strip().lower(), []).append(raw_value)
    return found


def read_header(found: Mapping[str, list[str | bytes]], name: str) -> str | WireProblem:
    """One required header's text, or why it is unusable."""
    values = found.get(name.lower())
    if not values:
        return WireProblem(name, "missing")
    if len(values) > 1:
        # Two identities in one request: whichever we picked, the client meant the other one.
        return WireProblem(name, "sent more than once")
    raw = values[0]
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            return WireProblem(name, "is not valid UTF-8")
    value = raw.strip()  # HTTP ignores surrounding whitespace
    if not value:
        return WireProblem(name, "empty")
    if has_control(value):
        return WireProblem(name, "contains a control character")
    return value


def read_trace_headers(headers: HeaderSource) -> dict[str, str]:
    """The request's trace context headers that are usable (once, UTF-8, no control
    characters), by lowercase name; an unusable one is left out, never an error: tracing must
    not refuse a request."""
    found = collect_headers(headers)
    usable = {name: read_header(found, name) for name in TRACE_HEADERS}
    return {name: value for name, value in usable.items() if isinstance(value, str)}


# --- reply ----------------------------------------------------------------------------------


def encode_reply_headers(
    *,
    outcome: OutcomeClass | None,
    fencing_acknowledged: bool,
    retry_after: int | None,
    request_id: str | None,
) -> dict[str, str]:
    headers: dict[str, str] = {}
    if outcome is not None:
        headers[OUTCOME] = outcome.value
    if fencing_acknowledged:
        headers[FENCING] = FENCING_ACKNOWLEDGED
    if retry_after is not None:
        headers[RETRY_AFTER] = str(retry_after)
    if request_id is not None:
        headers[REQUEST_ID] = request_id
    return headers


def decode_outcome(value: str | None) -> OutcomeClass | None:
    """The outcome class an ``X-Effectus-Outcome`` value names; None if it names none."""
    value = (value or "").strip()
    return OutcomeClass(value) if value in _OUTCOME_VALUES else None


def decode_fencing(value: str | None) -> bool:
    """Whether an ``X-Effectus-Fencing`` value acknowledges the grants."""
    return (value or "").strip().lower() == FENCING_ACKNOWLEDGED


def is_retry_after(value: str) -> bool:
    return _RETRY_AFTER.fullmatch(value.strip()) is not None


def retry_after_seconds(value: str, now: datetime) -> float | None:
    """How long a valid ``Retry-After`` asks to wait from ``now`` (when the answer arrived,
    timezone-aware): its delay seconds, or the time to its HTTP-date (0 when past); None when
    it is not one RFC 9110 allows or names no real date."""
    stripped = value.strip()
    if not is_retry_after(stripped):
        return None
    if stripped.isdigit():
        return float(stripped)
    try:
        when = datetime.strptime(stripped, "%a, %d %b %Y %H:%M:%S GMT").replace(tzinfo=UTC)
    except ValueError:
        return None
    return max((when - now).total_seconds(), 0.0)


def echo_matches(echoed: str, request_id: str) -> bool:
    """Whether an echoed ``X-Effectus-Request-ID`` names this attempt's request."""
    return echoed.strip() == request_id

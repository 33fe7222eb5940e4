"""The request side of the destination contract: read and verify effectusd's reserved headers.

Every check here guards the ledger: a request whose identity headers cannot be trusted must
not create, replay or conflict with a ledger row. Errors name the header and the rule it broke,
never the value, because values (fencing resources, the body) can carry argument data.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise
from typing import Any

from effectusd.core.canonical import CanonicalJSONError, canonical_text, parse_json, sha256_hex
from effectusd.core.states import Direction, OutcomeClass
from effectusd.destination.replies import REQUEST_ID, Reply, error_reply

IDEMPOTENCY_KEY = "Idempotency-Key"
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
RESERVED = (
    IDEMPOTENCY_KEY, REQUEST_ID, EXECUTION_ID, SAGA_ID, EFFECT_ID, ATTEMPT, DIRECTION, VERB,
    ARGUMENT_HASH, CONTRACT_HASH, FENCING_GRANTS, DEADLINE,
)  # fmt: skip
BODY = "body"  # the name errors about the request body use in place of a header

_HEX64 = re.compile(r"[0-9a-f]{64}")
_ATTEMPT = re.compile(r"[1-9][0-9]{0,17}")  # the executor's str(int); 18 digits fit a bigint
_RFC3339 = re.compile(
    r"(\d{4}-\d{2}-\d{2})[Tt](\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})"
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_TOKEN = 2**53 - 1  # the canonical JSON integer limit the executor writes tokens under

HeaderSource = Mapping[str, str] | Iterable[tuple[str | bytes, str | bytes]]


class ProtocolError(ValueError):
    """A request that breaks the wire protocol: answered 400, permanent_failure, not stored."""

    def __init__(self, header: str, reason: str) -> None:
        self.header = header
        self.reason = reason
        super().__init__(f"{header}: {reason}")

    def reply(self) -> Reply:
        return error_reply(400, OutcomeClass.PERMANENT, str(self))


@dataclass(frozen=True, slots=True)
class FencingGrant:
    resource: str
    token: int


@dataclass(frozen=True, slots=True)
class EffectusRequest:
    """One verified attempt. ``arguments`` is the parsed body; ``body`` the exact bytes."""

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
    deadline: datetime  # timezone-aware; advisory (see ledger.handle)
    body: bytes
    arguments: Any


def parse_request(headers: HeaderSource, body: bytes) -> EffectusRequest:
    """Verify the reserved headers and the body against X-Effectus-Argument-Hash.

    ``headers`` is a mapping or a sequence of (name, value) pairs; names are matched without
    regard to case and byte values are decoded as UTF-8 (the executor sends UTF-8, e.g. for a
    fencing resource like ``account:müller``). Pass raw bytes when your framework decodes
    header bytes as latin-1, as ASGI frameworks do.
    """
    found = _collect(headers)
    text = {name: _required(found, name) for name in RESERVED}
    for name in (IDEMPOTENCY_KEY, SAGA_ID, ARGUMENT_HASH, CONTRACT_HASH):
        if not _HEX64.fullmatch(text[name]):
            raise ProtocolError(name, "expected 64 lowercase hex digits")
    if not _ATTEMPT.fullmatch(text[ATTEMPT]):
        raise ProtocolError(ATTEMPT, "expected a positive decimal integer")
    try:
        direction = Direction(text[DIRECTION])
    except ValueError:
        raise ProtocolError(DIRECTION, "expected forward or compensation") from None
    if sha256_hex(body) != text[ARGUMENT_HASH]:
        raise ProtocolError(ARGUMENT_HASH, "does not match the SHA-256 of the body")
    try:
        arguments = parse_json(body)
    except (ValueError, RecursionError):
        # ValueError covers invalid UTF-8 too (UnicodeDecodeError is one).
        raise ProtocolError(BODY, "is not JSON") from None
    return EffectusRequest(
        idempotency_key=text[IDEMPOTENCY_KEY],
        request_id=text[REQUEST_ID],
        execution_id=text[EXECUTION_ID],
        saga_id=text[SAGA_ID],
        effect_id=text[EFFECT_ID],
        attempt=int(text[ATTEMPT]),
        direction=direction,
        verb=text[VERB],
        argument_hash=text[ARGUMENT_HASH],
        contract_hash=text[CONTRACT_HASH],
        fencing_grants=parse_fencing_grants(text[FENCING_GRANTS]),
        deadline=parse_deadline(text[DEADLINE]),
        body=body,
        arguments=arguments,
    )


def request_id_of(headers: HeaderSource) -> str | None:
    """The request's ``X-Effectus-Request-ID`` if it has a usable one, for echoing in an
    answer to a request that is refused before (or without) being parsed whole."""
    try:
        return _required(_collect(headers), REQUEST_ID)
    except ProtocolError:
        return None


def parse_fencing_grants(value: str) -> tuple[FencingGrant, ...]:
    """The canonical JSON array the executor writes; anything else is refused, not repaired.

    Exact canonical form is required because two spellings of one grant list would be two
    different claims to compare, and only a broken or forged client sends a non-canonical one.
    """
    try:
        parsed = parse_json(value)
    except (ValueError, RecursionError):
        raise ProtocolError(FENCING_GRANTS, "is not JSON") from None
    if not isinstance(parsed, list):
        raise ProtocolError(FENCING_GRANTS, "expected a JSON array")
    grants = []
    for index, item in enumerate(parsed):
        where = f"element {index}"
        if not isinstance(item, dict) or set(item) != {"resource", "token"}:
            raise ProtocolError(FENCING_GRANTS, f"{where} must have exactly resource and token")
        resource, token = item["resource"], item["token"]
        if not isinstance(resource, str) or not resource:
            raise ProtocolError(FENCING_GRANTS, f"{where}: resource must be a non-empty string")
        # bool is an int subclass; JSON true must not pass as token 1.
        if type(token) is not int or not 0 <= token <= MAX_TOKEN:
            raise ProtocolError(FENCING_GRANTS, f"{where}: token must be an integer 0..2^53-1")
        grants.append(FencingGrant(resource, token))
    resources = [grant.resource for grant in grants]
    if any(first >= second for first, second in pairwise(resources)):
        raise ProtocolError(FENCING_GRANTS, "resources must be sorted and unique")
    try:
        canonical = canonical_text(parsed)
    except CanonicalJSONError:
        raise ProtocolError(FENCING_GRANTS, "is not canonical JSON") from None
    if canonical != value:
        raise ProtocolError(FENCING_GRANTS, "is not canonical JSON")
    return tuple(grants)


def parse_deadline(value: str) -> datetime:
    # fromisoformat alone accepts many ISO 8601 forms RFC 3339 does not (no offset, week dates).
    match = _RFC3339.fullmatch(value)
    if match is None:
        raise ProtocolError(DEADLINE, "expected an RFC 3339 timestamp with an offset")
    date, time, fraction, offset = match.groups()
    # Microseconds are all Python keeps; nanoseconds are meaningless for a deadline anyway.
    micros = f".{fraction[:6].ljust(6, '0')}" if fraction else ""
    zone = "+00:00" if offset in "Zz" else offset
    whole = f"{date}T{time}{micros}{zone}"
    try:
        return datetime.fromisoformat(whole)
    except ValueError:
        raise ProtocolError(DEADLINE, "is not a valid date and time") from None


def _collect(headers: HeaderSource) -> dict[str, list[str | bytes]]:
    pairs: Iterable[tuple[str | bytes, str | bytes]] = (
        headers.items() if isinstance(headers, Mapping) else headers
    )
    found: dict[str, list[str | bytes]] = {}
    for raw_name, raw_value in pairs:
        # Names are ASCII tokens; latin-1 cannot fail, and a non-ASCII name matches nothing.
        name = raw_name.decode("latin-1") if isinstance(raw_name, bytes) else raw_name
        found.setdefault(name.strip().lower(), []).append(raw_value)
    return found  # values decoded lazily, so a bad unrelated header never fails the request


def _required(found: dict[str, list[str | bytes]], name: str) -> str:
    values = found.get(name.lower())
    if not values:
        raise ProtocolError(name, "missing")
    if len(values) > 1:
        # Two identities in one request: whichever we picked, the client meant the other one.
        raise ProtocolError(name, "sent more than once")
    value = _text(values[0], name).strip()  # HTTP ignores surrounding whitespace
    if not value:
        raise ProtocolError(name, "empty")
    if _CONTROL.search(value):
        raise ProtocolError(name, "contains a control character")
    return value


def _text(value: str | bytes, name: str) -> str:
    if isinstance(value, str):
        return value
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError(name, "is not valid UTF-8") from None

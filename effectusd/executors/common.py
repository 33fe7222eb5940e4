"""What every HTTP transport shares (docs/design.md section 5): the request it builds, how it turns
an answer into an outcome, and how it reports a failure.

A transport only sends and says what it saw on the wire. Whether a failed call "may have been
sent" is the transport's ``Wire.provably_not_sent``: a request counts as not sent only on
positive evidence that it never got a connection to write on. A false "not sent" can duplicate a
payment; a false "unknown" only waits for an operator, so every doubt resolves to unknown.
"""

from __future__ import annotations

import asyncio
import errno
import os
import re
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar, Generic, TypeVar

from effectusd.config import DestinationConfig, is_reserved_header
from effectusd.core.canonical import canonical_text, parse_json
from effectusd.core.states import OutcomeClass
from effectusd.executors.protocol import CallResult, Invocation
from effectusd.executors.storable import body_digest, printable, unstorable_reasons

OUTCOME_HEADER = "X-Effectus-Outcome"
FENCING_HEADER = "X-Effectus-Fencing"
REQUEST_ID_HEADER = "X-Effectus-Request-ID"  # sent, and echoed back by the destination kit
RETRY_AFTER_HEADER = "Retry-After"
EVIDENCE_HEADERS = (OUTCOME_HEADER, FENCING_HEADER, RETRY_AFTER_HEADER)
ANSWER_HEADERS = (*EVIDENCE_HEADERS, REQUEST_ID_HEADER)  # every header classification reads
MAX_ERROR_CHARS = 500
NOT_SENT = "not_sent"
MAYBE_SENT = "maybe_sent"
USER_AGENT = "effectusd"

_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")  # RFC 9110 token: header names, methods
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_OUTCOME_VALUES = frozenset(outcome.value for outcome in OutcomeClass)
# Retry-After as RFC 9110 allows it: delay seconds, or an IMF-fixdate.
_RETRY_AFTER = re.compile(
    r"[0-9]{1,10}|[A-Z][a-z]{2}, [0-9]{2} [A-Z][a-z]{2} [0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2} GMT"
)

Request = TypeVar("Request")


class InvalidInvocation(ValueError):
    """An invocation that cannot be put on the wire. Messages name fields, never values."""


def format_deadline(deadline: datetime) -> str:
    """RFC 3339 UTC with a Z and milliseconds."""
    if deadline.tzinfo is None or deadline.utcoffset() is None:
        raise InvalidInvocation("X-Effectus-Deadline: deadline must be timezone-aware")
    utc = deadline.astimezone(UTC)
    # Truncated, never rounded up: the destination must not be promised time we do not have.
    return f"{utc:%Y-%m-%dT%H:%M:%S}.{utc.microsecond // 1000:03d}Z"


def reserved_headers(inv: Invocation) -> dict[str, str]:
    """The engine's identity headers for one attempt; these always win over config headers."""
    grants = sorted(inv.fencing_grants, key=lambda grant: grant.resource)
    if len({grant.resource for grant in grants}) != len(grants):
        raise InvalidInvocation("X-Effectus-Fencing-Grants: duplicate resource")
    if inv.attempt < 1:
        raise InvalidInvocation("X-Effectus-Attempt: attempts start at 1")
    headers = {
        "Idempotency-Key": inv.idempotency_key,
        REQUEST_ID_HEADER: inv.request_id,
        "X-Effectus-Execution-ID": inv.execution_id,
        "X-Effectus-Saga-ID": inv.saga_id,
        "X-Effectus-Effect-ID": inv.effect_id,
        "X-Effectus-Attempt": str(inv.attempt),
        "X-Effectus-Direction": str(inv.direction),
        "X-Effectus-Verb": inv.verb,
        "X-Effectus-Argument-Hash": inv.argument_hash,
        "X-Effectus-Contract-Hash": inv.contract_hash,
        "X-Effectus-Fencing-Grants": canonical_text(
            [{"resource": grant.resource, "token": grant.token} for grant in grants]
        ),
        "X-Effectus-Deadline": format_deadline(inv.deadline),
    }
    for name, value in headers.items():
        # A CR or LF would let a value forge further headers; reject rather than escape.
        if _CONTROL.search(value):
            raise InvalidInvocation(f"{name}: contains a control character")
    return headers


def static_headers(
    name: str, config: DestinationConfig, environ: Mapping[str, str]
) -> dict[str, str]:
    """Config headers plus Authorization, validated once so a bad one never reaches the wire."""
    headers: dict[str, str] = {"Content-Type": "application/json"}
    for header, value in config.headers.items():
        # Config validation already refuses these; a model built without validation must
        # still not be able to send a second, conflicting identity header.
        if is_reserved_header(header) or header.strip().lower() == "authorization":
            continue
        if not _TOKEN.match(header) or _CONTROL.search(value):
            raise ValueError(f"destination {name!r}: header {header!r} is not a valid HTTP header")
        headers[header] = value
    variable = config.bearer_token_env
    if variable is not None:
        token = environ.get(variable)
        where = f"destination {name!r}: environment variable {variable} (bearer_token_env)"
        if token is None:
            raise ValueError(f"{where} is not set")
        token = token.strip()
        if not token:
            raise ValueError(f"{where} is empty")
        if not all("!" <= char <= "~" for char in token):
            raise ValueError(f"{where} holds characters not allowed in an HTTP header")
        headers["Authorization"] = f"Bearer {token}"
    return headers


def tls_context(config: DestinationConfig) -> ssl.SSLContext | None:
    """The verifying context for a configured CA file; None means the transport's default."""
    return ssl.create_default_context(cafile=config.ca_file) if config.ca_file else None


def error_name(exc: BaseException) -> str:
    """Class name plus errno name: enough to diagnose, never a message that might quote data."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError):  # its errno is an OpenSSL code, not an OS one
            return f"{type(exc).__name__} ({type(seen).__name__})"
        if isinstance(seen, OSError) and seen.errno is not None and seen.errno in errno.errorcode:
            return f"{type(exc).__name__} ({errno.errorcode[seen.errno]})"
        seen = seen.__cause__ or seen.__context__
    return type(exc).__name__


class Wire:
    """What one request did on the wire, as far as the transport can prove it."""

    __slots__ = ("body", "echo", "headers", "request_id", "status_code")

    def __init__(self) -> None:
        self.status_code: int | None = None
        self.headers: dict[str, str] = {}
        self.request_id = ""  # this attempt's, set before anything is sent
        self.echo: str | None = None  # how the destination's request-ID echo compared
        self.body: dict[str, Any] | None = None  # size and hash of a body we could not keep

    def provably_not_sent(self, exc: BaseException) -> bool:
        raise NotImplementedError

    @property
    def connection(self) -> str | None:
        """Either "new" or "reused", or None when the request never got a connection."""
        raise NotImplementedError

    def answered(self, status: int, headers: Mapping[str, str]) -> None:
        self.status_code = status
        # Stored and shown to operators: only values the protocol defines are kept verbatim, so
        # a destination that puts a token (or junk) in these headers does not get it stored.
        found = [name for name in EVIDENCE_HEADERS if name in headers]
        self.headers = {name: _evidence_value(name, headers[name]) for name in found}

    def result(
        self,
        started: float,
        outcome: OutcomeClass,
        error: str | None = None,
        *,
        result: Any = None,
        sent: str = MAYBE_SENT,
    ) -> CallResult:
        evidence: dict[str, Any] = {
            "sent": sent,
            "status_code": self.status_code,
            "headers": dict(self.headers),
            "elapsed_ms": round((time.monotonic() - started) * 1000),
            "connection": self.connection,
        }
        if self.echo is not None:
            evidence["request_id_echo"] = self.echo
        if self.body is not None:
            evidence["body"] = self.body
        acknowledged = self.headers.get(FENCING_HEADER, "").strip().lower() == "acknowledged"
        return CallResult(
            outcome=outcome,
            status_code=self.status_code,
            result=result,
            error=None if error is None else printable(error, MAX_ERROR_CHARS),
            fencing_acknowledged=acknowledged,
            evidence=evidence,
        )

    def not_sent(self, started: float, error: str) -> CallResult:
        return self.result(started, OutcomeClass.RETRYABLE, error, sent=NOT_SENT)


WireT = TypeVar("WireT", bound=Wire)


class BaseHttpExecutor(Generic[Request, WireT]):
    """One destination over one HTTP transport. Callers limit concurrency to max_concurrency.

    Subclasses build a transport request and exchange it; this class owns the invariant parts:
    validation, the overall deadline, classification, and what an error may say.
    """

    transport: ClassVar[str]  # the DestinationConfig.transport value that selects this class

    def __init__(
        self, name: str, config: DestinationConfig, *, environ: Mapping[str, str] | None = None
    ) -> None:
        self.name = name
        self.max_concurrency = config.max_concurrency
        self._base_url = config.base_url.rstrip("/")
        self._timeout = config.timeout.total_seconds()
        self._connect_timeout = config.connect_timeout.total_seconds()
        self._max_response_bytes = config.max_response_bytes
        self._status_map = dict(config.status_map)
        self._static_headers = static_headers(
            name, config, os.environ if environ is None else environ
        )

    async def aclose(self) -> None:
        raise NotImplementedError

    def _new_wire(self) -> WireT:
        raise NotImplementedError

    def _build(
        self, inv: Invocation, headers: dict[str, str], total: float, wire: WireT
    ) -> Request:
        """A transport request; must not touch the network. Raising means nothing was sent."""
        raise NotImplementedError

    async def _exchange(self, request: Request, wire: WireT, started: float) -> CallResult:
        """Send, record the answer on ``wire`` and finish with ``self._classify``."""
        raise NotImplementedError

    def _describe(self, exc: BaseException) -> str:
        return error_name(exc)

    async def call(self, inv: Invocation) -> CallResult:
        started = time.monotonic()
        wire = self._new_wire()
        wire.request_id = inv.request_id
        total = min(inv.timeout, self._timeout)
        try:
            if not _TOKEN.match(inv.method):
                raise InvalidInvocation("method is not an HTTP token")
            request = self._build(inv, reserved_headers(inv), total, wire)
        except Exception as exc:  # noqa: BLE001 - nothing was sent, whatever went wrong
            # Only our own messages are shown: others may quote the URL, i.e. argument values.
            reason = str(exc) if isinstance(exc, InvalidInvocation) else error_name(exc)
            return wire.not_sent(started, f"invalid invocation: {reason}")
        if total <= 0:
            return wire.not_sent(started, "no time left before the deadline")
        # Transport timeouts are per operation; this bounds the whole call, trickling bodies
        # and the wait for a pooled connection too.
        deadline = asyncio.timeout(total)
        try:
            async with deadline:
                return await self._exchange(request, wire, started)
        except Exception as exc:  # noqa: BLE001 - every failure must become a classified result
            what = f"timeout of {total:g} s" if deadline.expired() else self._describe(exc)
            if wire.provably_not_sent(exc):
                return wire.not_sent(started, f"{what} before the request was sent")
            error = f"{what} after the request may have been sent"
            return wire.result(started, OutcomeClass.UNKNOWN, error)

    async def _classify(
        self,
        wire: WireT,
        started: float,
        headers: Mapping[str, str],
        read_body: Callable[[int], Awaitable[bytes | None]],
    ) -> CallResult:
        status = wire.status_code
        assert status is not None
        echoed = headers.get(REQUEST_ID_HEADER)
        if echoed is not None:
            # An answer naming another request is not this one's, whatever it says: e.g. a
            # stray second response left on a kept-alive connection by an earlier exchange.
            wire.echo = "matched" if echoed.strip() == wire.request_id else "mismatched"
            if wire.echo == "mismatched":
                error = f"HTTP {status} whose {REQUEST_ID_HEADER} echo names another request"
                return wire.result(started, OutcomeClass.UNKNOWN, error)
        value = headers.get(OUTCOME_HEADER)
        named = _outcome(value)
        if 200 <= status < 300:
            if value is not None and named is not OutcomeClass.SUCCESS:
                # A 2xx that also names a failure contradicts itself; trust neither half.
                error = f"HTTP {status} contradicted by {OUTCOME_HEADER}"
                return wire.result(started, OutcomeClass.UNKNOWN, error)
            outcome = OutcomeClass.SUCCESS
        elif named is not None and named is not OutcomeClass.SUCCESS:
            outcome = named
        elif status in self._status_map:
            outcome = self._status_map[status]
        else:
            error = f"HTTP {status} without a valid {OUTCOME_HEADER} or status_map entry"
            return wire.result(started, OutcomeClass.UNKNOWN, error)
        if outcome is not OutcomeClass.SUCCESS:
            # The headers decided; an unread body only costs this keep-alive connection.
            return wire.result(started, outcome, f"HTTP {status}")

        declared = headers.get("Content-Length", "")
        limit = self._max_response_bytes
        body = None if declared.isdigit() and int(declared) > limit else await read_body(limit)
        if body is None:
            error = f"HTTP {status} with a body over max_response_bytes"
            return wire.result(started, OutcomeClass.UNKNOWN, error)
        if not body:
            return wire.result(started, OutcomeClass.SUCCESS)
        try:
            parsed = parse_json(body)
        except (ValueError, RecursionError):
            wire.body = body_digest(body)
            error = f"HTTP {status} with a body that is not JSON"
            return wire.result(started, OutcomeClass.UNKNOWN, error)
        reasons = unstorable_reasons(parsed)
        if reasons:
            # The destination answered, so this is not "not committed"; but a result that the
            # store cannot hold would fail every completion recorded with it. Keep size and hash.
            wire.body = body_digest(body)
            error = f"HTTP {status} with a JSON body that cannot be stored: {'; '.join(reasons)}"
            return wire.result(started, OutcomeClass.UNKNOWN, error)
        return wire.result(started, OutcomeClass.SUCCESS, result=parsed)


def _evidence_value(name: str, value: str) -> str:
    """The header's value if it is one the protocol defines, else only that it was invalid."""
    stripped = value.strip()
    if name == OUTCOME_HEADER:
        valid = stripped in _OUTCOME_VALUES
    elif name == FENCING_HEADER:
        stripped = stripped.lower()
        valid = stripped == "acknowledged"
    else:
        valid = _RETRY_AFTER.fullmatch(stripped) is not None
    return stripped if valid else f"(invalid, {len(value)} characters)"


def _outcome(value: str | None) -> OutcomeClass | None:
    value = (value or "").strip()
    return OutcomeClass(value) if value in _OUTCOME_VALUES else None

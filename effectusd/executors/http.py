"""The HTTP executor (DESIGN.md section 9): one destination, one httpx client.

Whether a failed call "may have been sent" is decided from what httpcore reports it did on the
wire (its documented ``trace`` request extension), never from exception class names alone: a
request counts as not sent only on positive evidence that it never reached a connection's
write path. A false "not sent" can duplicate a payment; a false "unknown" only waits for an
operator, so every doubt resolves to unknown.
"""

from __future__ import annotations

import asyncio
import errno
import os
import re
import ssl
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any

import httpx

from effectusd.config import DestinationConfig, is_reserved_header
from effectusd.core.canonical import canonical_text, parse_json
from effectusd.core.states import OutcomeClass
from effectusd.executors.protocol import CallResult, Invocation

OUTCOME_HEADER = "X-Effectus-Outcome"
FENCING_HEADER = "X-Effectus-Fencing"
EVIDENCE_HEADERS = (OUTCOME_HEADER, FENCING_HEADER, "Retry-After")
NOT_SENT = "not_sent"
MAYBE_SENT = "maybe_sent"

_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")  # RFC 9110 token: header names, methods
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# httpcore trace events that only happen while opening a new connection, before any request byte.
_CONNECT_EVENTS = frozenset(
    f"connection.{step}.{phase}"
    for step in ("connect_tcp", "start_tls")
    for phase in ("started", "failed")
)
_REQUEST_IO_PREFIXES = ("http11.", "http2.")
_OUTCOME_VALUES = frozenset(outcome.value for outcome in OutcomeClass)


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
        "X-Effectus-Request-ID": inv.request_id,
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


class _Wire:
    """What one request did, as reported by httpcore's ``trace`` extension and the response."""

    def __init__(self, executor: HttpExecutor) -> None:
        self._executor = executor
        self.events: list[str] = []
        self.status_code: int | None = None
        self.headers: dict[str, str] = {}

    async def __call__(self, name: str, info: Mapping[str, Any]) -> None:
        self.events.append(name)
        self._executor._trace_works = True

    @property
    def reached_request_io(self) -> bool:
        return any(name.startswith(_REQUEST_IO_PREFIXES) for name in self.events)

    def provably_not_sent(self, exc: BaseException) -> bool:
        if self.status_code is not None or self.reached_request_io:
            return False
        if self.events:
            # Failed (or was cut off) while opening a fresh connection: no request byte yet.
            return self.events[-1] in _CONNECT_EVENTS
        # No event at all means still queued for a pooled connection, but only if the trace
        # hook is known to fire in this process; otherwise silence proves nothing.
        return self._executor._trace_works and isinstance(exc, httpx.PoolTimeout | TimeoutError)

    @property
    def connection(self) -> str | None:
        if any(name.startswith("connection.connect_tcp.") for name in self.events):
            return "new"
        return "reused" if self.reached_request_io else None


class HttpExecutor:
    """Executor for one HTTP destination. Callers limit concurrency to ``max_concurrency``."""

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
        self._static_headers = _static_headers(
            name, config, os.environ if environ is None else environ
        )
        self._trace_works = False
        limits = httpx.Limits(
            max_connections=config.max_concurrency,
            max_keepalive_connections=config.max_concurrency,
        )
        transport = httpx.AsyncHTTPTransport(
            verify=_tls_verification(config), http1=True, http2=False, limits=limits, retries=0
        )  # retries=0: httpcore must never re-send on our behalf; retries are the engine's call
        self._client = httpx.AsyncClient(
            transport=transport,
            follow_redirects=False,
            trust_env=False,  # no proxies, netrc or CA bundles picked up from the environment
            cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),  # stateless calls
            headers={"User-Agent": "effectusd"},
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def call(self, inv: Invocation) -> CallResult:
        started = time.monotonic()
        wire = _Wire(self)
        total = min(inv.timeout, self._timeout)
        try:
            if not _TOKEN.match(inv.method):
                raise InvalidInvocation("method is not an HTTP token")
            headers = [*self._static_headers, *_encode(reserved_headers(inv))]
            request = self._client.build_request(
                inv.method,
                self._base_url + inv.path,
                content=inv.body,
                headers=headers,
                timeout=httpx.Timeout(total, connect=min(self._connect_timeout, total)),
                extensions={"trace": wire},
            )
        except Exception as exc:  # noqa: BLE001 - nothing was sent, whatever went wrong
            # Only our own messages are shown: others may quote the URL, i.e. argument values.
            reason = str(exc) if isinstance(exc, InvalidInvocation) else _name(exc)
            return _not_sent(wire, started, f"invalid invocation: {reason}")
        if total <= 0:
            return _not_sent(wire, started, "no time left before the deadline")

        response: httpx.Response | None = None
        try:
            # httpx timeouts are per operation; this bounds the whole call, trickling bodies too.
            async with asyncio.timeout(total):
                response = await self._client.send(request, stream=True)
                wire.status_code = response.status_code
                wire.headers = {
                    name: response.headers[name][:200]
                    for name in EVIDENCE_HEADERS
                    if name in response.headers
                }
                return await self._classify(response, wire, started)
        except Exception as exc:  # noqa: BLE001 - every failure must become a classified result
            what = f"timeout of {total:g} s" if isinstance(exc, TimeoutError) else _name(exc)
            if wire.provably_not_sent(exc):
                return _not_sent(wire, started, f"{what} before the request was sent")
            error = f"{what} after the request may have been sent"
            return _result(wire, started, OutcomeClass.UNKNOWN, error)
        finally:
            if response is not None:
                await response.aclose()

    async def _classify(self, response: httpx.Response, wire: _Wire, started: float) -> CallResult:
        status = response.status_code
        named = _outcome_header(response)
        if 200 <= status < 300:
            if OUTCOME_HEADER in response.headers and named is not OutcomeClass.SUCCESS:
                # A 2xx that also names a failure contradicts itself; trust neither half.
                error = f"HTTP {status} contradicted by {OUTCOME_HEADER}"
                return _result(wire, started, OutcomeClass.UNKNOWN, error)
            outcome = OutcomeClass.SUCCESS
        elif named is not None and named is not OutcomeClass.SUCCESS:
            outcome = named
        elif status in self._status_map:
            outcome = self._status_map[status]
        else:
            error = f"HTTP {status} without a valid {OUTCOME_HEADER} or status_map entry"
            return _result(wire, started, OutcomeClass.UNKNOWN, error)
        if outcome is not OutcomeClass.SUCCESS:
            # The headers decided; an unread body only costs this keep-alive connection.
            return _result(wire, started, outcome, f"HTTP {status}")

        body = await _read_capped(response, self._max_response_bytes)
        if body is None:
            error = f"HTTP {status} with a body over max_response_bytes"
            return _result(wire, started, OutcomeClass.UNKNOWN, error)
        if not body:
            return _result(wire, started, OutcomeClass.SUCCESS)
        try:
            parsed = parse_json(body)
        except (ValueError, RecursionError):
            error = f"HTTP {status} with a body that is not JSON"
            return _result(wire, started, OutcomeClass.UNKNOWN, error)
        return _result(wire, started, OutcomeClass.SUCCESS, result=parsed)


def _static_headers(
    name: str, config: DestinationConfig, environ: Mapping[str, str]
) -> list[tuple[bytes, bytes]]:
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
    return _encode(headers)


def _encode(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    # UTF-8 bytes, not httpx's ASCII default: a fencing resource may hold any character and
    # the destination must receive the exact canonical JSON text.
    return [(name.encode("ascii"), value.encode("utf-8")) for name, value in headers.items()]


def _tls_verification(config: DestinationConfig) -> ssl.SSLContext | bool:
    if not config.verify_tls:
        return False
    if config.ca_file:
        return ssl.create_default_context(cafile=config.ca_file)
    return True


def _outcome_header(response: httpx.Response) -> OutcomeClass | None:
    value = response.headers.get(OUTCOME_HEADER, "").strip()
    return OutcomeClass(value) if value in _OUTCOME_VALUES else None


async def _read_capped(response: httpx.Response, limit: int) -> bytes | None:
    """The decoded body, or None once it is known to exceed ``limit`` bytes."""
    declared = response.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _name(exc: BaseException) -> str:
    """Class name plus errno name: enough to diagnose, never a message that might quote data."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError):  # its errno is an OpenSSL code, not an OS one
            return f"{type(exc).__name__} ({type(seen).__name__})"
        if isinstance(seen, OSError) and seen.errno is not None and seen.errno in errno.errorcode:
            return f"{type(exc).__name__} ({errno.errorcode[seen.errno]})"
        seen = seen.__cause__ or seen.__context__
    return type(exc).__name__


def _not_sent(wire: _Wire, started: float, error: str) -> CallResult:
    return _result(wire, started, OutcomeClass.RETRYABLE, error, sent=NOT_SENT)


def _result(
    wire: _Wire,
    started: float,
    outcome: OutcomeClass,
    error: str | None = None,
    *,
    result: Any = None,
    sent: str = MAYBE_SENT,
) -> CallResult:
    evidence: dict[str, Any] = {
        "sent": sent,
        "status_code": wire.status_code,
        "headers": dict(wire.headers),
        "elapsed_ms": round((time.monotonic() - started) * 1000),
        "connection": wire.connection,
    }
    acknowledged = wire.headers.get(FENCING_HEADER, "").strip().lower() == "acknowledged"
    return CallResult(
        outcome=outcome,
        status_code=wire.status_code,
        result=result,
        error=error,
        fencing_acknowledged=acknowledged,
        evidence=evidence,
    )

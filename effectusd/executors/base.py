"""What every HTTP transport shares (docs/design.md section 5): the request it builds, the overall
deadline, and what a failure may say. Classifying the answer is ``executors.classify``.
"""

from __future__ import annotations

import asyncio
import errno
import os
import ssl
import string
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Generic, TypeVar
from urllib.parse import quote

from effectusd.config import TRANSPORT_HEADERS, DestinationConfig
from effectusd.core.states import OutcomeClass
from effectusd.core.transition import Completion
from effectusd.core.wire import (
    WireError,
    encode_request_headers,
    has_control,
    is_reserved_header,
    is_token,
)
from effectusd.executors.classify import Wire, classify
from effectusd.executors.protocol import Invocation

USER_AGENT = "effectusd"
# Idle connections are dropped by us before the 5 s after which uvicorn and Node drop them, so
# the race of reusing a connection the server is closing stays rare (it is still classified
# correctly when it happens: unknown, never "not sent").
KEEPALIVE_S = 4.0
_PATH_SAFE = "/?%!$&'()*+,;=:@[]"
_PATH_CHARS = frozenset(string.ascii_letters + string.digits + "-._~" + _PATH_SAFE)

Request = TypeVar("Request")
WireT = TypeVar("WireT", bound=Wire)


class InvalidInvocation(ValueError):
    """An invocation that cannot be put on the wire. Messages name fields, never values."""


def static_headers(
    name: str, config: DestinationConfig, environ: Mapping[str, str]
) -> dict[str, str]:
    """Config headers plus Authorization, validated once so a bad one never reaches the wire."""
    headers: dict[str, str] = {"Content-Type": "application/json"}
    for header, value in config.headers.items():
        # Config validation already refuses these; a model built without validation must
        # still not be able to send a second, conflicting identity header.
        lowered = header.strip().lower()
        if is_reserved_header(header) or lowered in TRANSPORT_HEADERS:
            continue
        if lowered == "authorization":
            continue
        if not is_token(header) or has_control(value):
            raise ValueError(f"destination {name!r}: header {header!r} is not a valid HTTP header")
        headers[header] = value
    token = config.bearer_token(name, environ)  # ConfigError: `run` exits 3 naming it
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def tls_context(config: DestinationConfig) -> ssl.SSLContext | None:
    """The verifying context for a configured CA file; None means the transport's default."""
    return ssl.create_default_context(cafile=config.ca_file) if config.ca_file else None


def verifying_tls_context(config: DestinationConfig) -> ssl.SSLContext:
    """The configured CA file's context, else one verifying against certifi's bundle (httpx's
    default), so that every transport trusts the same authorities."""
    configured = tls_context(config)
    if configured is not None:
        return configured
    import certifi

    return ssl.create_default_context(cafile=certifi.where())


def request_path(path: str) -> str:
    """``path`` as it goes on the request line: byte for byte when it is as the planner renders
    it (placeholders percent-encoded), else percent-encoded first (a literal space or non-ASCII
    letter in a configured path) with any fragment dropped, as httpx does. A control character
    is refused, never sent."""
    if _PATH_CHARS.issuperset(path):
        return path
    if has_control(path):
        raise InvalidInvocation("path contains a control character")
    return quote(path.partition("#")[0], safe=_PATH_SAFE)


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


class BaseHttpExecutor(Generic[Request, WireT]):
    """One destination over one HTTP transport. Callers limit concurrency: the pipeline's calls
    to max_concurrency, the probe loop's probes to probe_concurrency; the connection pool holds
    both (``connections``), so neither waits for the other.

    Subclasses build a transport request and exchange it; this class owns the invariant parts:
    validation, the overall deadline, classification, and what an error may say.
    """

    def __init__(
        self, name: str, config: DestinationConfig, *, environ: Mapping[str, str] | None = None
    ) -> None:
        self.name = name
        self.max_concurrency = config.max_concurrency
        self.connections = config.connections
        self._base_url = config.base_url.rstrip("/")
        self._timeout = config.timeout.total_seconds()
        self._connect_timeout = config.connect_timeout.total_seconds()
        self._max_response_bytes = config.max_response_bytes
        self._status_map = dict(config.status_map)
        self._answers = config.answers
        self._static_headers = static_headers(
            name, config, os.environ if environ is None else environ
        )

    async def aclose(self) -> None:
        raise NotImplementedError

    def _new_wire(self, inv: Invocation) -> WireT:
        raise NotImplementedError

    def _build(
        self, inv: Invocation, headers: dict[str, str], total: float, wire: WireT
    ) -> Request:
        """A transport request; must not touch the network. Raising means nothing was sent."""
        raise NotImplementedError

    async def _exchange(self, request: Request, wire: WireT, started: float) -> Completion:
        """Send, record the answer on ``wire`` and finish with ``self._classify``."""
        raise NotImplementedError

    def _describe(self, exc: BaseException) -> str:
        return error_name(exc)

    async def call(self, inv: Invocation) -> Completion:
        started = time.monotonic()
        wire = self._new_wire(inv)
        total = min(inv.timeout, self._timeout)
        wire.deadline = asyncio.get_running_loop().time() + total
        try:
            if not is_token(inv.method):
                raise InvalidInvocation("method is not an HTTP token")
            headers = encode_request_headers(inv)
            if inv.trace_headers:  # made by our own propagator; config cannot set these
                headers.update(inv.trace_headers)
            request = self._build(inv, headers, total, wire)
        except Exception as exc:  # noqa: BLE001 - nothing was sent, whatever went wrong
            # Only our own messages are shown: others may quote the URL, i.e. argument values.
            ours = isinstance(exc, InvalidInvocation | WireError)
            reason = str(exc) if ours else error_name(exc)
            return wire.not_sent(started, f"invalid invocation: {reason}")
        if total <= 0:
            return wire.not_sent(started, "no time left before the deadline")
        # Transport timeouts are per operation; this bounds the whole call, trickling bodies
        # and the wait for a pooled connection too, at the instant the wire's deadline names.
        deadline = asyncio.timeout_at(wire.deadline)
        try:
            async with deadline:
                return await self._exchange(request, wire, started)
        except Exception as exc:  # noqa: BLE001 - every failure must become a completion
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
    ) -> Completion:
        return await classify(
            wire,
            started,
            headers,
            read_body,
            status_map=self._status_map,
            max_response_bytes=self._max_response_bytes,
            answers=self._answers,
            destination=self.name,
        )

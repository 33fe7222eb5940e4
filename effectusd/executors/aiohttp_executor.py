"""The HTTP executor on aiohttp (docs/design.md section 5): one destination, one ClientSession.

Same request, same classification as the httpx executor (``effectusd.executors.base`` and
``effectusd.executors.classify``); only the evidence of what reached the wire differs.
aiohttp raises ServerDisconnectedError and ClientOSError for resets both before and after a
request was written, so exception classes prove nothing. The proof is the connector's: it
opens a connection (``_create_connection``) or takes a pooled one (``_get``) before it hands a
request the connection it will be written on, and no request byte can be written without one.
A call that failed after the connector said it was queued for (``_wait_for_available_connection``),
or opening, a connection but before it had one never had a connection to write on: that, and
only that, is "not sent". Everything else is unknown. The connector records these on the
request's ``_Wire`` at the points where aiohttp fires the matching trace signals
(``connection_queued_start``, ``connection_create_start``/``_end``, ``connection_reuseconn``):
a TraceConfig would make aiohttp build a trace, its parameters and a signal for every step of
every request (a tenth of the client's CPU per call).

aiohttp re-sends idempotent methods (PUT, DELETE, …) once when a pooled connection fails;
a middleware turns that failure into one aiohttp does not retry, because a re-send is the
engine's decision (a new attempt with a new request ID), never the transport's.

aiohttp notices a server's close of an idle pooled connection only when the event loop next
reads it, and would write the next request into it: an avoidable unknown outcome. The connector
therefore checks, as httpcore does, that a pooled connection has nothing to read before handing
it out, and drops it if it has (nothing was written on it: the request never had it).
"""

from __future__ import annotations

import os
import select
import ssl
import weakref
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from types import SimpleNamespace
from typing import Any

import aiohttp
from yarl import URL

from effectusd import faults
from effectusd.config import DestinationConfig
from effectusd.core.transition import Completion
from effectusd.executors.base import (
    KEEPALIVE_S,
    USER_AGENT,
    BaseHttpExecutor,
    error_name,
    request_path,
    verifying_tls_context,
)
from effectusd.executors.classify import ANSWER_HEADERS, Wire
from effectusd.executors.protocol import Invocation

_HEAD_HEADERS = (*ANSWER_HEADERS, "Content-Length")
_QUEUED, _CONNECTING = "queued", "connecting"


class _Wire(Wire):
    """What one request did, as reported by aiohttp's trace signals and the response."""

    __slots__ = ("acquired", "stage")

    def __init__(self, invocation: Invocation) -> None:
        super().__init__(invocation)
        self.stage: str | None = None  # set only by the connector: proof that its hooks ran
        self.acquired: str | None = None  # "new" / "reused": a connection was handed over

    def provably_not_sent(self, exc: BaseException) -> bool:
        return self.acquired is None and self.status_code is None and self.stage in _BEFORE_SENDING

    @property
    def connection(self) -> str | None:
        if self.acquired is not None:
            return self.acquired
        return "new" if self.stage == _CONNECTING else None


_BEFORE_SENDING = frozenset({_QUEUED, _CONNECTING})
_CURRENT: ContextVar[_Wire | None] = ContextVar("effectusd_aiohttp_wire", default=None)


class _CheckedConnector(aiohttp.TCPConnector):
    """A TCPConnector that never hands out a pooled connection the server has already closed."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._handed_out: weakref.WeakSet[Any] = weakref.WeakSet()

    async def connect(self, req: Any, *args: Any, **kwargs: Any) -> Any:
        while True:
            conn = await super().connect(req, *args, **kwargs)
            protocol = conn.protocol
            if protocol not in self._handed_out:
                self._handed_out.add(protocol)  # new: a TLS ticket may be pending, that's fine
                return _handed(conn, "new")
            if protocol is not None and not protocol.should_close and not _has_input(protocol):
                return _handed(conn, "reused")
            # An idle HTTP/1.1 connection has nothing to say: this is a close (FIN or RST), or
            # bytes (e.g. a second, unrequested response) that the loop has read into the
            # protocol's buffers or not read yet. The next request would take them for its
            # answer. This request never had the connection; try the next.
            conn.close()
            wire = _CURRENT.get()
            if wire is not None:
                wire.acquired = None

    # Where aiohttp fires its trace signals, without the cost of tracing every request.

    async def _wait_for_available_connection(self, key: Any, traces: Any) -> None:
        _mark(stage=_QUEUED)  # connection_queued_start: waiting for a slot under the limit
        await super()._wait_for_available_connection(key, traces)

    async def _create_connection(self, req: Any, traces: Any, timeout: Any) -> Any:
        _mark(stage=_CONNECTING)  # connection_create_start
        protocol = await super()._create_connection(req, traces, timeout)
        _mark(acquired="new")  # connection_create_end
        return protocol

    async def _get(self, key: Any, traces: Any) -> Any:
        conn = await super()._get(key, traces)
        if conn is not None:
            _mark(acquired="reused")  # connection_reuseconn
        return conn


def _mark(*, stage: str | None = None, acquired: str | None = None) -> None:
    wire = _CURRENT.get()
    if wire is not None:
        if stage is not None:
            wire.stage = stage
        if acquired is not None:
            wire.acquired = acquired


def _handed(conn: Any, how: str) -> Any:
    """A connection handed to the request: if a hook above did not run (an aiohttp that
    renamed it), the request still never counts as unsent once it had one."""
    wire = _CURRENT.get()
    if wire is not None and wire.acquired is None:
        wire.acquired = how
    return conn


def _has_input(protocol: Any) -> bool:
    transport = protocol.transport
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None:
        return True
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    return bool(poller.poll(0))


class _TransportRetryRefused(aiohttp.ClientError):
    """A pooled-connection failure, re-raised as a class aiohttp does not re-send on."""


class AiohttpExecutor(BaseHttpExecutor[tuple[str, URL, bytes, dict[str, str], Any], _Wire]):
    """Executor for one HTTP destination on aiohttp (callers limit concurrency, see
    BaseHttpExecutor)."""

    def __init__(
        self, name: str, config: DestinationConfig, *, environ: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(name, config, environ=environ)
        self._tls: ssl.SSLContext | bool = False
        if config.verify_tls:
            self._tls = verifying_tls_context(config)
        self._session: aiohttp.ClientSession | None = None
        self._keep_alive = config.keep_alive
        self._closed = False
        self._default_timeout = aiohttp.ClientTimeout(
            total=None, connect=None, sock_read=None, sock_connect=self._connect_timeout
        )

    def _open(self) -> aiohttp.ClientSession:
        """The session, made on first use: aiohttp binds it to the running event loop."""
        if self._closed:
            raise RuntimeError("executor is closed")
        connector = _CheckedConnector(
            limit=self.connections,
            limit_per_host=0,
            ssl=self._tls,
            keepalive_timeout=KEEPALIVE_S if self._keep_alive else None,
            force_close=not self._keep_alive,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),  # stateless calls: cookies are never sent back
            trust_env=False,  # no proxies or netrc picked up from the environment
            headers={"User-Agent": USER_AGENT, **self._static_headers},
            timeout=self._default_timeout,
            auto_decompress=True,  # bounded per chunk by aiohttp, capped in total by us
            raise_for_status=False,
            requote_redirect_url=False,
            trace_configs=_trace_configs(),
            middlewares=(_no_transport_retry,),
        )
        return self._session

    async def aclose(self) -> None:
        self._closed = True
        if self._session is not None:
            await self._session.close()

    def _new_wire(self, inv: Invocation) -> _Wire:
        return _Wire(inv)

    def _build(
        self, inv: Invocation, headers: dict[str, str], total: float, wire: _Wire
    ) -> tuple[str, URL, bytes, dict[str, str], Any]:
        # exactly these bytes, never re-quoted
        url = URL(self._base_url + request_path(inv.path), encoded=True)
        timeout = self._default_timeout
        if total < self._connect_timeout:
            timeout = aiohttp.ClientTimeout(
                total=None, connect=None, sock_read=None, sock_connect=total
            )
        return inv.method, url, inv.body, headers, timeout

    async def _exchange(
        self, request: tuple[str, URL, bytes, dict[str, str], Any], wire: _Wire, started: float
    ) -> Completion:
        method, url, body, headers, timeout = request
        session = self._session or self._open()
        token = _CURRENT.set(wire)
        try:
            response = await session.request(
                method,
                url,
                data=body,
                headers=headers,
                allow_redirects=False,
                timeout=timeout,
            )
        finally:
            _CURRENT.reset(token)
        try:
            # Repeated headers are joined, as httpx does: a duplicated outcome is no outcome.
            found = response.headers
            head = {name: ", ".join(found.getall(name)) for name in _HEAD_HEADERS if name in found}
            wire.answered(response.status, head)
            result = await self._classify(wire, started, head, _body_reader(response))
        except BaseException:
            response.close()
            raise
        response.release()  # back to the pool only if the body was read to its end
        return result

    def _describe(self, exc: BaseException) -> str:
        if isinstance(exc, _TransportRetryRefused) and exc.__cause__ is not None:
            exc = exc.__cause__
        return error_name(exc)


def _body_reader(response: aiohttp.ClientResponse) -> Callable[[int], Awaitable[bytes | None]]:
    async def read(limit: int) -> bytes | None:
        """The decoded body, or None once it is known to exceed ``limit`` bytes."""
        chunks: list[bytes] = []
        size = 0
        while chunk := await response.content.readany():
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    return read


async def _no_transport_retry(
    request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
) -> aiohttp.ClientResponse:
    try:
        return await handler(request)
    except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError) as exc:
        raise _TransportRetryRefused() from exc


# --- the chaos suite's fault point ---------------------------------------------------------


async def _body_sent(session: Any, context: SimpleNamespace, params: Any) -> None:
    faults.point("after_send")  # the chaos suite's "request left, no answer yet"


def _trace_configs() -> list[aiohttp.TraceConfig]:
    """Only the chaos suite's "after_send" needs a trace (the stages are the connector's)."""
    if os.environ.get("EFFECTUSD_FAULT") != "after_send":
        return []
    config = aiohttp.TraceConfig()
    config.on_request_chunk_sent.append(_body_sent)
    return [config]

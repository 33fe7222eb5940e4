"""The HTTP executor on httpx (docs/design.md section 5): one destination, one httpx client.

Whether a failed call "may have been sent" is decided from what httpcore reports it did on the
wire (its documented ``trace`` request extension), never from exception class names alone: a
request counts as not sent only on positive evidence that it never reached a connection's
write path. Request building and classification are shared with the other transports
(``effectusd.executors.base`` and ``effectusd.executors.classify``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any

import h11
import httpx

from effectusd import faults
from effectusd.config import DestinationConfig
from effectusd.core.transition import Completion
from effectusd.executors.base import USER_AGENT, BaseHttpExecutor, tls_context
from effectusd.executors.classify import Wire
from effectusd.executors.inflate import ACCEPT_ENCODING, Inflater
from effectusd.executors.protocol import Invocation

# httpcore trace events that only happen while opening a new connection, before any request byte.
_CONNECT_EVENTS = frozenset(
    f"connection.{step}.{phase}"
    for step in ("connect_tcp", "start_tls")
    for phase in ("started", "failed")
)
_REQUEST_IO_PREFIXES = ("http11.", "http2.")


class _Wire(Wire):
    """What one request did, as reported by httpcore's ``trace`` extension and the response."""

    __slots__ = ("_executor", "events")

    def __init__(self, executor: HttpxExecutor, invocation: Invocation) -> None:
        super().__init__(invocation)
        self._executor = executor
        self.events: list[str] = []

    async def __call__(self, name: str, info: Mapping[str, Any]) -> None:
        self.events.append(name)
        self._executor._trace_works = True
        if name == "http11.send_request_body.complete":
            faults.point("after_send")

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


class HttpxExecutor(BaseHttpExecutor[httpx.Request, _Wire]):
    """Executor for one HTTP destination on httpx (callers limit concurrency, see
    BaseHttpExecutor)."""

    def __init__(
        self, name: str, config: DestinationConfig, *, environ: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(name, config, environ=environ)
        self._trace_works = False
        self._static = _encode(self._static_headers)
        limits = httpx.Limits(
            max_connections=config.connections,
            max_keepalive_connections=config.connections if config.keep_alive else 0,
        )
        verify = (tls_context(config) or True) if config.verify_tls else False
        transport = httpx.AsyncHTTPTransport(
            verify=verify, http1=True, http2=False, limits=limits, retries=0
        )  # retries=0: httpcore must never re-send on our behalf; retries are the engine's call
        self._client = httpx.AsyncClient(
            transport=transport,
            follow_redirects=False,
            trust_env=False,  # no proxies, netrc or CA bundles picked up from the environment
            cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),  # stateless calls
            headers={"User-Agent": USER_AGENT, "Accept-Encoding": ACCEPT_ENCODING},
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    def _new_wire(self, inv: Invocation) -> _Wire:
        return _Wire(self, inv)

    def _build(
        self, inv: Invocation, headers: dict[str, str], total: float, wire: _Wire
    ) -> httpx.Request:
        return self._client.build_request(
            inv.method,
            self._base_url + inv.path,
            content=inv.body,
            headers=[*self._static, *_encode(headers)],
            timeout=httpx.Timeout(total, connect=min(self._connect_timeout, total)),
            extensions={"trace": wire},
        )

    async def _exchange(self, request: httpx.Request, wire: _Wire, started: float) -> Completion:
        response = await self._client.send(request, stream=True)
        try:
            wire.answered(response.status_code, response.headers)
            return await self._classify(wire, started, response.headers, _body_reader(response))
        finally:
            await response.aclose()


def _encode(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    # UTF-8 bytes, not httpx's ASCII default: a fencing resource may hold any character and
    # the destination must receive the exact canonical JSON text.
    return [(name.encode("ascii"), value.encode("utf-8")) for name, value in headers.items()]


def _body_reader(response: httpx.Response) -> Callable[[int], Awaitable[bytes | None]]:
    async def read(limit: int) -> bytes | None:
        """The decoded body, or None once it is known to exceed ``limit`` bytes: never more
        than about ``limit`` decoded bytes are held, however well the body compresses."""
        # Decoded by us, in bounded steps (httpx inflates each network chunk whole).
        inflater = Inflater(response.headers.get_list("Content-Encoding", split_commas=True))
        chunks: list[bytes] = []
        size = 0
        # The stream itself, not aiter_raw(): that hands the connection back to the pool at
        # the end of the body, before _retire_if_bytes_left could look at what is left on it.
        stream = response.stream
        assert isinstance(stream, httpx.AsyncByteStream)  # an AsyncClient's always is
        async for raw in stream:
            for chunk in inflater.feed(raw, limit + 1):
                size += len(chunk)
                if size > limit:
                    return None
                chunks.append(chunk)
        inflater.close()  # a truncated stream: the answer may be cut anywhere
        _retire_if_bytes_left(response)
        return b"".join(chunks)

    return read


def _retire_if_bytes_left(response: httpx.Response) -> None:
    """A connection holding bytes past the end of this answer (e.g. a second, unrequested
    response) must not carry another request: the next one would read them as its answer.
    httpcore checks the socket for unread bytes before reusing a connection, but not what
    h11 already read; marking h11's send as failed makes httpcore close it, not pool it."""
    state: Any = response.stream
    for attribute in ("_stream", "_httpcore_stream", "_stream", "_connection", "_h11_state"):
        state = getattr(state, attribute, None)  # private to httpx/httpcore: checked by tests
    if isinstance(state, h11.Connection) and state.trailing_data[0]:
        state.send_failed()

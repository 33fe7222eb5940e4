"""The loopback HTTP server of the daemon (/metrics, /healthz, /readyz) and of the console:
aiohttp.web behind a few bounds of our own.

* One request per connection (every answer closes it, at once: nothing unread is waited
  for), and the whole request, its line, headers and body, within REQUEST_DEADLINE_S of the
  connection opening; a connection that is slower is closed (before headers: without an
  answer; during the body: 408).
* At most MAX_CONNECTIONS open at once. One more goes to the lane (at most LANE_SIZE): its
  request line and headers within LANE_DEADLINE_S, no body read, and only a GET of an
  ``always`` path (/healthz, /readyz) answered; anything else is 503. When the lane is full,
  its oldest connection still waiting for its request is closed to make room, so
  connections held open (idle, or sending headers slowly) cannot keep a health check out.
  Every refusal is counted (``on_refused``: the daemon's metric) and logged at most once
  every REFUSAL_LOG_EVERY_S, as counts.
* aiohttp's own limits: a request line or header field over 8190 bytes and any malformed
  message (a Content-Length that is not a number, a bad chunk) are 400; a body over
  MAX_BODY bytes is 413. Chunked bodies are read like any other.
* Every answer, aiohttp's own error answers too, carries ANSWER_HEADERS: ``Server:
  effectusd`` (no versions) and ``X-Content-Type-Options: nosniff``.
* What a client sent wrong is logged as one line, never a traceback; a traceback is logged
  only for a fault of ours (answered 500).

Routes come from ``installs``: functions that add them to the application (the dispatcher's
own and, composed by the command line, the console's), so neither imports the other.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Collection

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_request import BaseRequest

log = logging.getLogger("effectusd.http")

REQUEST_DEADLINE_S = 5.0
MAX_CONNECTIONS = 64
LANE_SIZE = 256
LANE_DEADLINE_S = 1.0
# Connections accepted at most per turn of the event loop. A connection's first bytes are
# read about three turns after it is accepted: the lane holds several batches, so the ones
# accepted after a health check cannot push it out before its request is seen.
ACCEPT_BATCH = 32
LISTEN_QUEUE = 1024  # connections the kernel holds until they are accepted
REFUSAL_LOG_EVERY_S = 60.0
MAX_BODY = 65_536
ANSWER_HEADERS = {"Server": "effectusd", "X-Content-Type-Options": "nosniff"}
BUSY_TEXT = b"too many connections now\n"
BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
    + b"".join(f"{name}: {value}\r\n".encode() for name, value in ANSWER_HEADERS.items())
    + b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(BUSY_TEXT), BUSY_TEXT)
)
SECURITY_HEADERS = {
    # the console's pages load nothing from anywhere, run no script and are never framed
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # no-referrer would make Chromium send Origin: null
    "Cache-Control": "no-store",
}

Install = Callable[[web.Application], None]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Refused = Callable[[str], None]  # called with why: "busy" or "crowded"


def text_response(status: int, text: str, **headers: str) -> web.Response:
    return web.Response(status=status, text=text, content_type="text/plain", headers=headers)


class _OneLineForClientErrors(logging.Filter):
    """aiohttp logs a malformed request with its traceback; it is the client's, not ours."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, HttpProcessingError):
            record.msg = "a malformed request refused (%s, %d)"
            record.args = (type(error).__name__, error.code)
            record.exc_info = None
            record.exc_text = None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


_server_log = logging.getLogger("effectusd.http.server")
_server_log.addFilter(_OneLineForClientErrors())


class _RequestHandler(web.RequestHandler):
    """aiohttp's protocol, its own error answers (a malformed request's 400, a fault's 500)
    with our headers; every other answer gets them in ``_close_after``."""

    __slots__ = ()

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        response = super().handle_error(request, status, exc, message)
        response.headers.update(ANSWER_HEADERS)
        return response


class _Bounded(asyncio.Protocol):
    """aiohttp's protocol for one connection, counted and on a deadline."""

    def __init__(self, inner: asyncio.Protocol, server: WebServer) -> None:
        self.inner = inner
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.in_lane = False
        self.head_seen = False  # in the lane: its request line and headers have arrived

    @property
    def waiting(self) -> bool:
        """Still waiting for its request line and headers."""
        return self.timer is not None and not self.head_seen

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        deadline = self.server.place(self, transport)
        if deadline is None:
            transport.write(BUSY)
            transport.close()
            return
        self.transport = transport
        self.timer = asyncio.get_running_loop().call_later(deadline, self.expire)
        self.inner.connection_made(transport)

    def expire(self) -> None:
        """The request did not arrive in time: close without an answer."""
        if self.transport is not None and self.timer is not None:
            self.timer = None
            self.transport.abort()

    def drop(self) -> None:
        """Closed without an answer to make room for a newer connection."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.transport is not None:
            self.server.lane.pop(self.transport, None)
            self.transport.abort()

    def request_started(self) -> float:
        """The headers arrived: seconds left for the body."""
        left = REQUEST_DEADLINE_S
        if self.timer is not None:
            left = max(self.timer.when() - asyncio.get_running_loop().time(), 0.0)
            self.timer.cancel()
            self.timer = None
        return left

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is None:
            return  # refused: never handed to aiohttp
        if self.timer is not None:
            self.timer.cancel()
        self.server.open.pop(self.transport, None)
        self.server.lane.pop(self.transport, None)
        self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.transport is None:
            return
        if self.in_lane and data[:1].isalpha() and b"\r\n\r\n" in data:
            # no longer one to close for room: a request line and its blank line are here,
            # so it is answered (or refused as malformed) now, not held. Blank lines alone
            # are not (a parser skips them and waits); a head split across reads is seen
            # complete when aiohttp hands it over, in request_started.
            self.head_seen = True
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.transport is not None else None

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class _Refusals:
    """Connections refused for want of room: each passed to ``counted``, and logged at most
    once every REFUSAL_LOG_EVERY_S as the counts since the previous line (never a request's
    contents)."""

    def __init__(self, what: str, counted: Refused | None) -> None:
        self.what = what
        self.counted = counted
        self.since: Counter[str] = Counter()
        self.next_line = 0.0

    def __call__(self, why: str, server: WebServer) -> None:
        self.since[why] += 1
        if self.counted is not None:
            self.counted(why)
        now = time.monotonic()
        if now < self.next_line:
            return
        self.next_line = now + REFUSAL_LOG_EVERY_S
        log.warning(
            "%s: refused %d connection(s) (%d busy: answered 503 past the cap of %d; "
            "%d crowded: closed waiting for their request, for newer ones) since the last "
            "such line; %d open, %d in the lane",
            self.what,
            sum(self.since.values()),
            self.since["busy"],
            MAX_CONNECTIONS,
            self.since["crowded"],
            len(server.open),
            len(server.lane),
        )
        self.since.clear()


class WebServer:
    """An aiohttp.web application on one listening socket, bounded as the module says;
    ``always``: the paths answered to a GET past the cap (they read no body)."""

    def __init__(
        self,
        what: str,
        *installs: Install,
        always: Collection[str] = (),
        on_refused: Refused | None = None,
    ) -> None:
        self.what = what
        self.always = frozenset(always)
        self.open: dict[asyncio.BaseTransport, _Bounded] = {}  # under MAX_CONNECTIONS
        self.lane: dict[asyncio.BaseTransport, _Bounded] = {}  # past it, oldest first
        self.refused = _Refusals(what, on_refused)
        self.app = web.Application(client_max_size=MAX_BODY, middlewares=[self._bounds])
        self.app.on_response_prepare.append(_close_after)
        for install in installs:
            install(self.app)
        self.runner = web.AppRunner(self.app, shutdown_timeout=1.0)
        self.listener: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> int:
        await self.runner.setup()
        manager = self.runner.server
        assert manager is not None
        loop = asyncio.get_running_loop()

        def connection() -> _Bounded:
            # lingering_time 0: an answer given before the body was read closes at once
            inner = _RequestHandler(
                manager,
                loop=loop,
                access_log=None,  # type: ignore[arg-type]  # None: no access log (aiohttp's way)
                logger=_server_log,
                lingering_time=0,
            )
            return _Bounded(inner, self)

        self.listener = await loop.create_server(connection, host, port, backlog=ACCEPT_BATCH)
        for listening in self.listener.sockets:
            # asyncio listens with its accept batch as the queue; a longer queue keeps a
            # burst of connections from dropping the health checker's (its retry is 1 s)
            with listening.dup() as same:
                same.listen(LISTEN_QUEUE)
        bound = int(self.listener.sockets[0].getsockname()[1])
        log.info("%s on http://%s:%d", self.what, host, bound)
        return bound

    async def close(self) -> None:
        if self.listener is not None:
            self.listener.close()
        await self.runner.cleanup()
        if self.listener is not None:
            await self.listener.wait_closed()

    def place(self, connection: _Bounded, transport: asyncio.BaseTransport) -> float | None:
        """Where a new connection goes: under the cap (the whole deadline), else into the
        lane (its short deadline), closing the lane's oldest waiting connection when it is
        full; None, refused, when every connection in the lane is being answered."""
        if len(self.open) < MAX_CONNECTIONS:
            self.open[transport] = connection
            return REQUEST_DEADLINE_S
        if len(self.lane) >= LANE_SIZE:
            oldest = next((c for c in self.lane.values() if c.waiting), None)
            if oldest is None:
                self.refused("busy", self)
                return None
            oldest.drop()
            self.refused("crowded", self)
        self.lane[transport] = connection
        connection.in_lane = True
        return LANE_DEADLINE_S

    @web.middleware
    async def _bounds(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """The body within what is left of the deadline, before any handler runs; past the
        cap, a GET of an ``always`` path without reading its body, anything else 503."""
        transport = request.transport
        connection = (self.open.get(transport) or self.lane.get(transport)) if transport else None
        left = connection.request_started() if connection else REQUEST_DEADLINE_S
        if connection is not None and connection.in_lane:
            if request.method == "GET" and request.path in self.always:
                return await handler(request)
            self.refused("busy", self)
            return text_response(503, BUSY_TEXT.decode())
        try:
            async with asyncio.timeout(left):
                await request.read()
        except TimeoutError:
            return text_response(408, "the request body came too slowly\n")
        except web.RequestPayloadError:
            return text_response(400, "the request body is malformed\n")
        return await handler(request)


async def _close_after(_request: web.Request, response: web.StreamResponse) -> None:
    """One request per connection, and our headers (the hook runs after aiohttp chose its
    own)."""
    response.force_close()
    response.headers["Connection"] = "close"
    response.headers.update(ANSWER_HEADERS)


async def serve_until_cancelled(
    server: WebServer, host: str, port: int, ready: asyncio.Event | None = None
) -> None:
    """Serve until the task is cancelled; ``ready`` is set once listening."""
    await server.start(host, port)
    if ready is not None:
        ready.set()
    try:
        await asyncio.Event().wait()
    finally:
        await server.close()

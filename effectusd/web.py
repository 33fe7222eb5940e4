"""The loopback HTTP server of the daemon (/metrics, /healthz, /readyz) and of the console:
aiohttp.web behind a few bounds of our own.

* One request per connection (every answer closes it), and the whole request, its line,
  headers and body, within REQUEST_DEADLINE_S of the connection opening; a connection that
  is slower is closed (before headers: without an answer; during the body: 408).
* At most MAX_CONNECTIONS open at once; one more is answered 503 and closed.
* aiohttp's own limits: a request line or header field over 8190 bytes and any malformed
  message (a Content-Length that is not a number, a bad chunk) are 400; a body over
  MAX_BODY bytes is 413. Chunked bodies are read like any other.
* What a client sent wrong is logged as one line, never a traceback; a traceback is logged
  only for a fault of ours (answered 500).

Routes come from ``installs``: functions that add them to the application (the dispatcher's
own and, composed by the command line, the console's), so neither imports the other.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

log = logging.getLogger("effectusd.http")

REQUEST_DEADLINE_S = 5.0
MAX_CONNECTIONS = 64
MAX_BODY = 65_536
BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
    b"Content-Length: 24\r\nConnection: close\r\n\r\ntoo many connections now\n"
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


class _Bounded(asyncio.Protocol):
    """aiohttp's protocol for one connection, counted and on a deadline."""

    def __init__(self, inner: asyncio.Protocol, server: WebServer) -> None:
        self.inner = inner
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        if len(self.server.open) >= MAX_CONNECTIONS:
            transport.write(BUSY)
            transport.close()
            return
        self.transport = transport
        self.server.open[transport] = self
        loop = asyncio.get_running_loop()
        self.timer = loop.call_later(REQUEST_DEADLINE_S, self.expire)
        self.inner.connection_made(transport)

    def expire(self) -> None:
        """The request did not arrive in time: close without an answer."""
        if self.transport is not None and self.timer is not None:
            self.timer = None
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
        self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.transport is not None:
            self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.transport is not None else None

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class WebServer:
    """An aiohttp.web application on one listening socket, bounded as the module says."""

    def __init__(self, what: str, *installs: Install) -> None:
        self.what = what
        self.open: dict[asyncio.BaseTransport, _Bounded] = {}
        self.app = web.Application(client_max_size=MAX_BODY, middlewares=[self._bounds])
        self.app.on_response_prepare.append(_close_after)
        for install in installs:
            install(self.app)
        self.runner = web.AppRunner(
            self.app, access_log=None, shutdown_timeout=1.0, logger=_server_log
        )
        self.listener: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> int:
        await self.runner.setup()
        factory = self.runner.server
        assert factory is not None
        loop = asyncio.get_running_loop()
        self.listener = await loop.create_server(lambda: _Bounded(factory(), self), host, port)
        bound = int(self.listener.sockets[0].getsockname()[1])
        log.info("%s on http://%s:%d", self.what, host, bound)
        return bound

    async def close(self) -> None:
        if self.listener is not None:
            self.listener.close()
        await self.runner.cleanup()
        if self.listener is not None:
            await self.listener.wait_closed()

    @web.middleware
    async def _bounds(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """The body within what is left of the deadline, before any handler runs."""
        connection = self.open.get(request.transport) if request.transport else None
        left = connection.request_started() if connection else REQUEST_DEADLINE_S
        try:
            async with asyncio.timeout(left):
                await request.read()
        except TimeoutError:
            return text_response(408, "the request body came too slowly\n")
        except web.RequestPayloadError:
            return text_response(400, "the request body is malformed\n")
        return await handler(request)


async def _close_after(_request: web.Request, response: web.StreamResponse) -> None:
    """One request per connection (the hook runs after aiohttp chose its headers)."""
    response.force_close()
    response.headers["Connection"] = "close"


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

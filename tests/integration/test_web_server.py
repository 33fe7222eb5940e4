"""The bounded aiohttp server the daemon and the console share (effectusd.web), over raw
sockets: what reaches a handler, what is refused on the wire, and what the log says."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from effectusd import web as web_module
from effectusd.web import WebServer
from tests.support.wire import chunked, exchange, status_of, tracebacks


async def _echo(request: web.Request) -> web.Response:
    body = await request.read()
    return web.Response(text=f"{request.method} {len(body)} {body[:32].decode()}")


@contextlib.asynccontextmanager
async def serving() -> AsyncIterator[int]:
    server = WebServer("test", lambda app: app.router.add_route("*", "/{path:.*}", _echo))
    port = await server.start("127.0.0.1", 0)
    try:
        yield port
    finally:
        await server.close()


async def test_a_chunked_body_reaches_the_handler_whole() -> None:
    async with serving() as port:
        answer = await exchange(
            port,
            b"POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
            + chunked(b'{"a": "b"}', 3),
        )
    assert status_of(answer) == 200
    assert answer.endswith(b'POST 10 {"a": "b"}')
    assert b"Connection: close" in answer  # one request per connection


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        ("POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: ²\r\n\r\n".encode(), 400),
        ("POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: ²\r\n\r\n".encode("latin-1"), 400),
        (b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n", 400),
        (b"GET /" + b"a" * 65_537 + b" HTTP/1.1\r\nHost: h\r\n\r\n", 400),
        (b"GET /x HTTP/1.1\r\nHost: h\r\nX-Long: " + b"a" * 20_000 + b"\r\n\r\n", 400),
        (b"POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
        (b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 70000\r\n\r\n" + b"a" * 70_000, 413),
    ],
    ids=[
        "superscript-length",
        "superscript-length-latin1",
        "negative-length",
        "64kib-line",
        "long-header",
        "bad-chunk",
        "big",
    ],
)
async def test_a_malformed_request_is_answered_with_a_4xx_and_logged_without_a_traceback(
    request_bytes: bytes, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with serving() as port:
        answer = await exchange(port, request_bytes)
    assert status_of(answer) == status
    assert tracebacks(caplog) == []


async def test_headers_sent_a_line_at_a_time_cannot_hold_a_connection_past_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The deadline is for the whole request, not per line: a client that keeps sending
    header lines is cut off without an answer."""
    monkeypatch.setattr(web_module, "REQUEST_DEADLINE_S", 0.3)
    lines = 400  # 20s at one line every 50ms: far past the deadline
    async with serving() as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /x HTTP/1.1\r\nHost: h\r\n")
        sent = 0
        with contextlib.suppress(ConnectionError):
            while sent < lines and not reader.at_eof():
                writer.write(b"X-Slow: 1\r\n")
                await writer.drain()
                sent += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(reader.read(1), 0.05)
        writer.close()
    assert sent < lines
    assert reader.at_eof() or reader.exception() is not None


async def test_connections_past_the_cap_are_answered_503_and_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(web_module, "MAX_CONNECTIONS", 3)
    async with serving() as port:
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
        busy = await exchange(port, b"GET /x HTTP/1.1\r\nHost: h\r\n\r\n")
        # a held connection still gets its answer: the cap refuses only the one too many
        reader, writer = held[0]
        writer.write(b"GET /y HTTP/1.1\r\nHost: h\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(), 30)
        for _reader, writer in held:
            writer.close()
    assert status_of(busy) == 503
    assert status_of(answer) == 200 and answer.endswith(b"GET 0 ")

"""The bounded aiohttp server the daemon and the console share (effectusd.web), over raw
sockets: what reaches a handler, what is refused on the wire, and what the log says."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from effectusd import web as web_module
from effectusd.dispatcher.metrics import Metrics
from effectusd.dispatcher.observability import ObservabilityServer
from effectusd.web import WebServer
from tests.integration.test_observability import sample
from tests.support.wire import chunked, exchange, status_of, tracebacks


async def _echo(request: web.Request) -> web.Response:
    body = await request.read()
    return web.Response(text=f"{request.method} {len(body)} {body[:32].decode()}")


REFUSED = "effectusd_http_connections_refused_total"


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


async def _fine() -> tuple[bool, dict[str, object]]:
    return True, {}


@contextlib.asynccontextmanager
async def observing() -> AsyncIterator[tuple[ObservabilityServer, int]]:
    """The daemon's /metrics, /healthz and /readyz (health always fine) on a free port."""
    server = ObservabilityServer(Metrics(), _fine, _fine)
    port = await server.start("127.0.0.1", 0)
    try:
        yield server, port
    finally:
        await server.close()


def refused(server: ObservabilityServer, why: str) -> float:
    return sample(server.metrics.exposition().decode(), REFUSED, reason=why)


def _descriptors_for(connections: int) -> None:
    """Raise this process's soft limit on open files (to the hard one at most), for the
    neighbour it starts, which inherits it: one descriptor a connection, and some spare."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = connections + 512
    if soft != resource.RLIM_INFINITY and soft < needed:
        limit = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))


async def test_healthz_answers_every_check_within_a_second_while_a_neighbour_holds_1200() -> None:
    """1,000 idle and 200 slow-header connections, from another process, each opened again
    as soon as the server closes it."""
    idle, slow = 1_000, 200
    _descriptors_for(idle + slow)
    async with observing() as (server, port):
        neighbour = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.support.neighbour",
            *(str(n) for n in (port, idle, slow)),
            stdout=asyncio.subprocess.PIPE,
            cwd=Path(__file__).parents[2],  # where tests.support is found
        )
        try:
            assert neighbour.stdout is not None
            async with asyncio.timeout(60):
                assert await neighbour.stdout.readline() == b"ready\n"
                while len(server.http.open) < web_module.MAX_CONNECTIONS:
                    await asyncio.sleep(0.01)
            statuses = []
            for _ in range(100):
                async with asyncio.timeout(1.0):  # the bound, for each check
                    answer = await exchange(port, b"GET /healthz HTTP/1.1\r\nHost: h\r\n\r\n")
                statuses.append(status_of(answer))
        finally:
            neighbour.terminate()
            await neighbour.wait()
    assert statuses == [200] * 100
    assert refused(server, "crowded") > 0


async def test_a_refused_request_is_closed_at_once_counted_and_logged_as_counts_only(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Past the cap, only /healthz and /readyz are answered; a refusal with a body announced
    and never sent is closed at once, not after aiohttp's lingering read (10 s)."""
    monkeypatch.setattr(web_module, "MAX_CONNECTIONS", 1)
    caplog.set_level(logging.INFO)
    announced = b"Content-Length: 100000\r\n\r\n"
    async with observing() as (server, port):
        held = await asyncio.open_connection("127.0.0.1", port)
        healthz = await exchange(port, b"GET /healthz HTTP/1.1\r\nHost: h\r\n\r\n")
        answers = []
        for path in ("/metrics", "/private-path-77", "/readyz"):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f"POST {path} HTTP/1.1\r\nHost: h\r\n".encode() + announced)
            answers.append(await asyncio.wait_for(reader.read(), 2.0))  # closed: EOF
            writer.close()
        busy = refused(server, "busy")
        held[1].close()
    assert status_of(healthz) == 200
    assert [status_of(a) for a in answers] == [503, 503, 503]
    assert busy == 3
    lines = [r.getMessage() for r in caplog.records if r.name == "effectusd.http"]
    [line] = [text for text in lines if "refused" in text]  # once, not once per refusal
    assert "refused 1 connection" in line and "1 busy" in line
    assert not any("private-path-77" in r.getMessage() for r in caplog.records)


async def test_a_slow_body_is_answered_408_and_closed_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(web_module, "REQUEST_DEADLINE_S", 0.3)
    async with serving() as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 100\r\n\r\nsome")
        answer = await asyncio.wait_for(reader.read(), 2.0)  # aiohttp would linger 10 s
        writer.close()
    assert status_of(answer) == 408


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /x HTTP/1.1\r\nHost: h\r\n\r\n",
        b"GET /<script> HTTP/1.1\r\nHost: h\r\nContent-Length: 1x\r\n\r\n",
        b"GET /x HTTP/1.1\r\nHost: h\r\nX-A\x01: <b>\r\n\r\n",
        b"BREW /x HTTP/9.9\r\n\r\n",
    ],
    ids=["answered", "bad-length", "bad-header", "bad-line"],
)
async def test_every_answer_says_nosniff_and_names_no_server_software(
    request_bytes: bytes,
) -> None:
    async with serving() as port:
        answer = await exchange(port, request_bytes)
    head = answer.partition(b"\r\n\r\n")[0].lower()
    assert b"\r\nx-content-type-options: nosniff" in head
    assert b"\r\nserver: effectusd\r\n" in head + b"\r\n"
    assert b"aiohttp" not in head and b"python" not in head


async def test_blank_lines_alone_cannot_hold_a_place_in_the_lane_against_a_health_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A parser skips blank lines before a request and waits: they are no request."""
    monkeypatch.setattr(web_module, "MAX_CONNECTIONS", 1)
    monkeypatch.setattr(web_module, "LANE_SIZE", 4)
    async with observing() as (server, port):
        held = [await asyncio.open_connection("127.0.0.1", port)]
        for _ in range(4):
            held.append(await asyncio.open_connection("127.0.0.1", port))
            held[-1][1].write(b"\r\n\r\n")
        async with asyncio.timeout(30):
            while len(server.http.lane) < 4:
                await asyncio.sleep(0.01)
        healthz = await exchange(port, b"GET /healthz HTTP/1.1\r\nHost: h\r\n\r\n")
        for _reader, writer in held:
            writer.close()
    assert status_of(healthz) == 200
    assert refused(server, "crowded") == 1

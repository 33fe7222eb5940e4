"""Raw HTTP/1.1 over a socket, for what an HTTP client library would not send."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest


async def exchange(port: int, request: bytes) -> bytes:
    """Send ``request`` on a new connection; everything the server answers until it closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 30)
    finally:
        writer.close()


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def body_of(answer: bytes) -> bytes:
    return answer.partition(b"\r\n\r\n")[2]


def json_of(answer: bytes) -> object:
    return json.loads(body_of(answer))


def chunked(body: bytes, size: int = 7) -> bytes:
    """``body`` as a chunked transfer coding, ``size`` bytes a chunk."""
    parts = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def tracebacks(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """What was logged with a traceback, or as an error: a fault of ours, not the client's."""
    return [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]

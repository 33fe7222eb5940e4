"""A deliberately tiny HTTP/1.1 server on asyncio: one request per connection, no framework.

The daemon's /metrics and /healthz and the console share it. Bounded everywhere: a request
line and headers within 5s and 16 KiB, a body within MAX_BODY bytes; anything else is
answered with an error and the connection closed.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

log = logging.getLogger("effectusd.http")

READ_TIMEOUT_S = 5
MAX_HEADER_BYTES = 16_384
MAX_BODY = 65_536
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


class BadRequest(Exception):
    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Request:
    method: str
    target: str
    headers: Mapping[str, str]  # lower-case names; a repeated header keeps its last value
    body: bytes = b""

    @property
    def path(self) -> str:
        return urlsplit(self.target).path

    @property
    def query(self) -> dict[str, str]:
        """The query string, one value per name (the last)."""
        return {k: v[-1] for k, v in parse_qs(urlsplit(self.target).query).items()}

    def form(self) -> dict[str, str]:
        """An application/x-www-form-urlencoded body, one value per name (the last)."""
        text = self.body.decode("utf-8", errors="replace")
        return {k: v[-1] for k, v in parse_qs(text, keep_blank_values=True).items()}

    def json(self) -> dict[str, Any]:
        try:
            data = json.loads(self.body or b"{}")
        except ValueError:
            raise BadRequest("400 Bad Request", "the body is not JSON") from None
        if not isinstance(data, dict):
            raise BadRequest("400 Bad Request", "the body must be a JSON object")
        return data


@dataclass
class Response:
    status: str
    content_type: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)

    def encode(self) -> bytes:
        lines = [
            f"HTTP/1.1 {self.status}",
            f"Content-Type: {self.content_type}",
            f"Content-Length: {len(self.body)}",
            "Connection: close",
            *(f"{name}: {value}" for name, value in self.headers.items()),
        ]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + self.body


def json_response(status: str, data: Any) -> Response:
    body = json.dumps(data, ensure_ascii=False, default=str).encode()
    return Response(status, "application/json", body, dict(SECURITY_HEADERS))


def text_response(status: str, text: str) -> Response:
    return Response(status, "text/plain", text.encode())


Handler = Callable[[Request], Awaitable[Response]]


async def read_request(reader: asyncio.StreamReader) -> Request:
    """One request: its line, headers and (with Content-Length) body; BadRequest if not."""
    request_line = await asyncio.wait_for(reader.readline(), READ_TIMEOUT_S)
    headers: dict[str, str] = {}
    size = len(request_line)
    while (line := await asyncio.wait_for(reader.readline(), READ_TIMEOUT_S)) not in (
        b"\r\n",
        b"\n",
        b"",
    ):
        size += len(line)
        if size > MAX_HEADER_BYTES:
            raise BadRequest("431 Request Header Fields Too Large", "headers too large")
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    parts = request_line.decode("latin-1").split()
    method, target = (parts[0], parts[1]) if len(parts) >= 2 else ("", "")
    length = headers.get("content-length", "0")
    if not length.isdigit():
        raise BadRequest("400 Bad Request", "bad Content-Length")
    if int(length) > MAX_BODY:
        raise BadRequest("413 Content Too Large", f"bodies are limited to {MAX_BODY} bytes")
    body = await asyncio.wait_for(reader.readexactly(int(length)), READ_TIMEOUT_S)
    return Request(method, target, headers, body)


class HttpServer:
    """Serves ``handler`` on one listening socket, a connection per request."""

    def __init__(self, handler: Handler, what: str) -> None:
        self.handler = handler
        self.what = what
        self.server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> int:
        self.server = await asyncio.start_server(self._serve, host, port)
        bound = int(self.server.sockets[0].getsockname()[1])
        log.info("%s on http://%s:%d", self.what, host, bound)
        return bound

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                response = await self.handler(await read_request(reader))
            except BadRequest as exc:
                response = text_response(exc.status, f"{exc}\n")
            writer.write(response.encode())
            await writer.drain()
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

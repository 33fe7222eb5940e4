"""The daemon's loopback HTTP endpoints: /metrics (Prometheus), /healthz and /readyz.

A deliberately tiny HTTP/1.1 responder on asyncio: three GET routes, no framework needed.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable

from effectusd.dispatcher.metrics import Metrics

log = logging.getLogger("effectusd.http")

Check = Callable[[], Awaitable[tuple[bool, dict[str, object]]]]


class ObservabilityServer:
    def __init__(self, metrics: Metrics, healthy: Check, ready: Check) -> None:
        self.metrics = metrics
        self.healthy = healthy
        self.ready = ready
        self.server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> int:
        self.server = await asyncio.start_server(self._serve, host, port)
        bound = int(self.server.sockets[0].getsockname()[1])
        log.info("metrics and health on http://%s:%d", host, bound)
        return bound

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await asyncio.wait_for(reader.readline(), 5)
            while (await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
                pass
            parts = request_line.decode("latin-1").split()
            method, path = (parts[0], parts[1]) if len(parts) >= 2 else ("", "")
            status, content_type, body = await self._route(method, path.split("?")[0])
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _route(self, method: str, path: str) -> tuple[str, str, bytes]:
        if method != "GET":
            return "405 Method Not Allowed", "text/plain", b"GET only\n"
        if path == "/metrics":
            return "200 OK", "text/plain; version=0.0.4", self.metrics.exposition()
        if path in ("/healthz", "/readyz"):
            ok, detail = await (self.healthy() if path == "/healthz" else self.ready())
            body = json.dumps({"status": "ok" if ok else "failing", **detail}).encode()
            return ("200 OK" if ok else "503 Service Unavailable"), "application/json", body
        return "404 Not Found", "text/plain", b"not found\n"

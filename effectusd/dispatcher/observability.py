"""The daemon's loopback HTTP endpoints: /metrics (Prometheus), /healthz and /readyz, and,
when enabled, the operator console and admin API (effectusd.console) on the same port.

Three GET routes of its own on the tiny server of effectusd.console.http; every other path
goes to the console when there is one.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from effectusd.console.http import Handler, HttpServer, Request, Response, text_response
from effectusd.dispatcher.metrics import Metrics

Check = Callable[[], Awaitable[tuple[bool, dict[str, object]]]]
OWN_PATHS = ("/metrics", "/healthz", "/readyz")


class ObservabilityServer:
    def __init__(
        self, metrics: Metrics, healthy: Check, ready: Check, console: Handler | None = None
    ) -> None:
        self.metrics = metrics
        self.healthy = healthy
        self.ready = ready
        self.console = console
        what = "metrics, health and console" if console else "metrics and health"
        self.http = HttpServer(self._route, what)

    async def start(self, host: str, port: int) -> int:
        return await self.http.start(host, port)

    async def close(self) -> None:
        await self.http.close()

    async def _route(self, request: Request) -> Response:
        path = request.path
        if self.console is not None and path not in OWN_PATHS:
            return await self.console(request)
        if request.method != "GET":
            return text_response("405 Method Not Allowed", "GET only\n")
        if path == "/metrics":
            return Response("200 OK", "text/plain; version=0.0.4", self.metrics.exposition())
        if path in ("/healthz", "/readyz"):
            ok, detail = await (self.healthy() if path == "/healthz" else self.ready())
            body = json.dumps({"status": "ok" if ok else "failing", **detail}).encode()
            status = "200 OK" if ok else "503 Service Unavailable"
            return Response(status, "application/json", body)
        return text_response("404 Not Found", "not found\n")

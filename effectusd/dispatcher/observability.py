"""The daemon's loopback HTTP endpoints: /metrics (Prometheus), /healthz and /readyz, and,
when enabled, the operator console and admin API (effectusd.console) on the same port; and
its one log line per transition.

Three GET routes of its own on the tiny server of effectusd.console.http; every other path
goes to the console when there is one.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from effectusd.console.http import Handler, HttpServer, Request, Response, text_response
from effectusd.core.transition import Completion, Transition
from effectusd.dispatcher.metrics import Metrics

Check = Callable[[], Awaitable[tuple[bool, dict[str, object]]]]
OWN_PATHS = ("/metrics", "/healthz", "/readyz")
log = logging.getLogger("effectusd.dispatcher")  # the transitions are the pipeline's


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


def log_transition(completion: Completion, transition: Transition, row: Mapping[str, Any]) -> None:
    """One line per transition: ids, attempt and classes only, never argument values."""
    if not log.isEnabledFor(logging.INFO):
        return
    log.info(
        "%s %s/%s #%s %s -> %s%s",
        row["saga_id"][:12],
        row["effect_id"],
        row["direction"],
        completion.attempt,
        completion.outcome.value,
        transition.dispatch_state.value,
        f" (saga {transition.saga.state.value})" if transition.saga else "",
        extra={
            "saga_id": row["saga_id"],
            "effect_id": row["effect_id"],
            "direction": row["direction"],
            "attempt": completion.attempt,
            "outcome": completion.outcome.value,
            "dispatch_state": transition.dispatch_state.value,
            "saga_state": transition.saga.state.value if transition.saga else None,
            "settled_by": completion.settled_by,
        },
    )

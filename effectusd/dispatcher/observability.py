"""The daemon's loopback HTTP endpoints: /metrics (Prometheus), /healthz and /readyz, on
effectusd.web's bounded aiohttp server, with whatever routes the command line adds beside
them (the operator console, when enabled); and what each record applied, counted and logged
(one line per transition).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from aiohttp import web

from effectusd.core.budgets import answered_not_committed
from effectusd.core.states import DispatchState
from effectusd.core.transition import Completion, Transition
from effectusd.dispatcher.metrics import Metrics
from effectusd.store.dispatch import RecordReport
from effectusd.web import Install, WebServer, text_response

Check = Callable[[], Awaitable[tuple[bool, dict[str, object]]]]
OWN_PATHS = ("/metrics", "/healthz", "/readyz")
ALWAYS = ("/healthz", "/readyz")  # answered even past the server's connection cap
log = logging.getLogger("effectusd.dispatcher")  # the transitions are the pipeline's


class ObservabilityServer:
    """/metrics, /healthz and /readyz (GET only), then ``extra``'s routes for every other
    path."""

    def __init__(
        self, metrics: Metrics, healthy: Check, ready: Check, extra: Sequence[Install] = ()
    ) -> None:
        self.metrics = metrics
        self.healthy = healthy
        self.ready = ready
        what = "metrics, health and added routes (the console)" if extra else "metrics and health"
        self.http = WebServer(what, self._install, *extra, always=ALWAYS, on_refused=self._refused)

    async def start(self, host: str, port: int) -> int:
        return await self.http.start(host, port)

    async def close(self) -> None:
        await self.http.close()

    def _refused(self, why: str) -> None:
        self.metrics.child(self.metrics.http_refused, why).inc()

    def _install(self, app: web.Application) -> None:
        for path in OWN_PATHS:  # any method: a POST is ours to refuse, not the next route's
            app.router.add_route("*", path, self._route)

    async def _route(self, request: web.Request) -> web.Response:
        if request.method != "GET":
            return text_response(405, "GET only\n")
        if request.path == "/metrics":
            return web.Response(
                body=self.metrics.exposition(),
                headers={"Content-Type": "text/plain; version=0.0.4"},
            )
        ok, detail = await (self.healthy() if request.path == "/healthz" else self.ready())
        body = json.dumps({"status": "ok" if ok else "failing", **detail})
        return web.Response(status=200 if ok else 503, text=body, content_type="application/json")


def observe_record(metrics: Metrics, report: RecordReport) -> None:
    """Count and log what a record applied: each outcome, each answer a destination gave
    that it did not commit and that now waits to be retried, each transition."""
    metrics.late_completions.inc(report.late)
    for completion, transition, row in report.transitions:
        metrics.child(
            metrics.outcomes,
            row["destination"],
            row["verb"],
            row["direction"],
            completion.outcome.value,
        ).inc()
        waits = transition.dispatch_state is DispatchState.RETRY_WAIT
        if waits and answered_not_committed(completion.cause.settled_by, completion.outcome):
            metrics.child(
                metrics.waiting_for_destination,
                row["destination"],
                "yes" if completion.written else "no",
            ).inc()
        log_transition(completion, transition, row)


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
            "settled_by": completion.cause.settled_by,
        },
    )

"""The admin API: JSON under /api (docs/operations.md section 8).

GET  /api/overview                       counts by state, ready queue, outcome rates
GET  /api/sagas?state=&plan_id=&execution_id=&destination=&older_than=&limit=
GET  /api/sagas/ID                       one saga: the view `sagas show --json` prints
GET  /api/blocked?limit=                 blocked sagas: what blocks them and the evidence
POST /api/sagas/ID/ACTION                resolve | retry | cancel | adopt-contract

An action answers what the CLI's --json prints: the report (200), or the refusal
{"ok": false, "refused": KIND, "error": ...} with 409 (conflict), 404 or 422 (invalid).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

from effectusd.console.http import BadRequest, Request, Response, json_response
from effectusd.console.security import Guard, Principal
from effectusd.console.service import ACTIONS, BadInput, ConsoleService, Filters
from effectusd.core.operator_decisions import RefusalKind, Refused

log = logging.getLogger("effectusd.console")

SAGA_ID = re.compile(r"[0-9a-f]{64}")
REFUSAL_STATUS = {
    RefusalKind.CONFLICT: "409 Conflict",
    RefusalKind.NOT_FOUND: "404 Not Found",
    RefusalKind.INVALID: "422 Unprocessable Content",
}
OutcomeCounts = Callable[[], Mapping[str, int]]


def error(status: str, message: str, **extra: Any) -> Response:
    return json_response(status, {"ok": False, "error": message, **extra})


async def run_action(
    service: ConsoleService,
    action: str,
    saga_id: str,
    fields: Mapping[str, Any],
    principal: Principal,
) -> tuple[str, dict[str, Any]]:
    """One operator action as the given principal: (HTTP status, the CLI's --json answer)."""
    actor = principal.actor(fields.get("actor") if isinstance(fields.get("actor"), str) else None)
    try:
        report = await service.act(action, saga_id, fields, actor)
    except Refused as exc:
        return REFUSAL_STATUS[exc.kind], {
            "ok": False,
            "refused": exc.kind.value,
            "error": exc.message,
        }
    except BadInput as exc:
        return "422 Unprocessable Content", {"ok": False, "refused": "invalid", "error": str(exc)}
    log.info("console: %s on saga %s by %s", action, saga_id, actor)
    return "200 OK", report.as_dict()


class Api:
    def __init__(
        self, service: ConsoleService, guard: Guard, outcomes: OutcomeCounts | None = None
    ) -> None:
        self.service = service
        self.guard = guard
        self.outcomes = outcomes

    async def handle(self, request: Request) -> Response:
        principal = self.guard.bearer(request)
        if principal is None:
            response = error("401 Unauthorized", "a valid bearer token is needed")
            response.headers["WWW-Authenticate"] = 'Bearer realm="effectusd console"'
            return response
        parts = request.path.strip("/").split("/")[1:]  # after "api"
        try:
            if request.method == "GET":
                return await self._read(parts, request)
            if request.method == "POST":
                return await self._act(parts, request, principal)
        except BadInput as exc:
            return error("400 Bad Request", str(exc))
        except BadRequest as exc:
            return error(exc.status, str(exc))
        return error("405 Method Not Allowed", "GET to read, POST to act")

    async def _read(self, parts: list[str], request: Request) -> Response:
        if parts == ["overview"]:
            data = await self.service.overview()
            if self.outcomes is not None:
                data["attempt_outcomes_since_start"] = dict(self.outcomes())
            return json_response("200 OK", data)
        if parts == ["sagas"]:
            rows = await self.service.sagas(Filters.parse(request.query))
            return json_response("200 OK", {"sagas": rows})
        if parts == ["blocked"]:
            limit = Filters.parse({"limit": request.query.get("limit", "100")}).limit
            return json_response("200 OK", {"blocked": await self.service.blocked(limit)})
        if len(parts) == 2 and parts[0] == "sagas" and SAGA_ID.fullmatch(parts[1]):
            view = await self.service.saga(parts[1])
            if view is None:
                return error("404 Not Found", f"saga {parts[1]} not found")
            return json_response("200 OK", view)
        return error("404 Not Found", "no such endpoint")

    async def _act(self, parts: list[str], request: Request, principal: Principal) -> Response:
        if not (len(parts) == 3 and parts[0] == "sagas" and parts[2] in ACTIONS):
            return error("404 Not Found", "no such action")
        if not SAGA_ID.fullmatch(parts[1]):
            return error("404 Not Found", "a saga id is 64 lower-case hex digits")
        if not principal.can_write:
            return error("403 Forbidden", "this token may read, not act (scope read)")
        # JSON only: another site's page cannot send it without a preflight (never answered)
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != "application/json":
            return error("415 Unsupported Media Type", "send the fields as application/json")
        if "origin" in request.headers and not self.guard.same_origin(request):
            return error("403 Forbidden", "cross-origin request refused")
        status, answer = await run_action(
            self.service, parts[2], parts[1], request.json(), principal
        )
        return json_response(status, answer)

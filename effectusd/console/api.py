"""The admin API: JSON under /api (docs/operations.md section 8).

GET  /api/overview                       counts by state, ready queue, outcome rates
GET  /api/sagas?state=&plan_id=&execution_id=&destination=&older_than=&limit=
GET  /api/sagas/ID                       one saga: the view `sagas show --json` prints
GET  /api/blocked?limit=                 blocked sagas: what blocks them and the evidence
POST /api/sagas/ID/ACTION                resolve | retry | cancel | adopt-contract

ID is a saga's full id or a unique start of it. An action answers what the CLI's --json
prints: the report (200), or the refusal {"ok": false, "refused": KIND, "error": ...} with
409 (conflict), 404 or 422 (invalid). With several stores, lists carry each row's ``store``
label and ``unreached`` (label: why) names the stores that could not be read; a saga is found
in whichever store holds it: an ID that fits several sagas is refused with 409 ("ambiguous",
each of them in ``candidates`` with its store), and one no store searched holds, while a
store could not be searched, with 503 ("unreached").
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from effectusd.console.security import Guard, Principal
from effectusd.console.service import ACTIONS, BadInput, ConsoleService, Filters, console_words
from effectusd.console.stores import NotLocated
from effectusd.core.canonical import MAX_JSON_DEPTH, parse_json
from effectusd.core.display import json_document
from effectusd.core.operator_decisions import RefusalKind, Refused
from effectusd.web import SECURITY_HEADERS

log = logging.getLogger("effectusd.console")

# A saga's full id or the start of one.
SAGA_ID = re.compile(r"[0-9a-f]{1,64}")
REFUSAL_STATUS = {
    RefusalKind.CONFLICT: 409,
    RefusalKind.NOT_FOUND: 404,
    RefusalKind.INVALID: 422,
}
NOT_LOCATED_STATUS = {"not_found": 404, "ambiguous": 409, "unreached": 503}
OutcomeCounts = Callable[[], Mapping[str, int]]


def json_response(status: int, data: Any, headers: Mapping[str, str] | None = None) -> web.Response:
    body = json_document(data)
    return web.Response(
        status=status,
        text=body,
        content_type="application/json",
        headers={**SECURITY_HEADERS, **(headers or {})},
    )


def not_located(exc: NotLocated) -> tuple[int, dict[str, Any]]:
    """A saga name no one saga answers to: (HTTP status, the refusal)."""
    answer: dict[str, Any] = {"ok": False, "refused": exc.kind, "error": exc.message}
    if exc.candidates:
        answer["candidates"] = exc.candidates
    return NOT_LOCATED_STATUS[exc.kind], answer


def error(status: int, message: str, headers: Mapping[str, str] | None = None) -> web.Response:
    return json_response(status, {"ok": False, "error": message}, headers)


async def json_fields(request: web.Request) -> dict[str, Any]:
    """The JSON object of a request body; BadInput saying what is wrong with it."""
    try:
        data = parse_json(await request.read() or b"{}", max_depth=MAX_JSON_DEPTH)
    except ValueError as exc:
        raise BadInput(f"the body is not JSON the console can use: {exc}") from None
    if not isinstance(data, dict):
        raise BadInput("the body must be a JSON object")
    return data


async def run_action(
    service: ConsoleService,
    action: str,
    saga_id: str,
    fields: Mapping[str, Any],
    principal: Principal,
) -> tuple[int, dict[str, Any]]:
    """One operator action as the given principal: (HTTP status, the CLI's --json answer)."""
    try:
        actor = principal.actor(service.operator_name(fields))
        label, report = await service.act(action, saga_id, fields, actor)
    except Refused as exc:
        return REFUSAL_STATUS[exc.kind], {
            "ok": False,
            "refused": exc.kind.value,
            "error": console_words(exc.message),
        }
    except BadInput as exc:
        return 422, {"ok": False, "refused": "invalid", "error": str(exc)}
    except NotLocated as exc:
        return not_located(exc)
    log.info("console: %s on saga %s by %s", action, report.saga_id, actor)
    # several stores: which one held the saga, as the CLI's --json says
    return 200, report.as_dict() if label is None else {**report.as_dict(), "store": label}


class Api:
    def __init__(
        self, service: ConsoleService, guard: Guard, outcomes: OutcomeCounts | None = None
    ) -> None:
        self.service = service
        self.guard = guard
        self.outcomes = outcomes

    async def handle(self, request: web.Request) -> web.Response:
        principal = self.guard.bearer(request.headers)
        if principal is None:
            challenge = {"WWW-Authenticate": 'Bearer realm="effectusd console"'}
            return error(401, "a valid bearer token is needed", challenge)
        parts = request.path.strip("/").split("/")[1:]  # after "api"
        try:
            if request.method == "GET":
                return await self._read(parts, request)
            if request.method == "POST":
                return await self._act(parts, request, principal)
        except BadInput as exc:
            return error(400, str(exc))
        except NotLocated as exc:
            return json_response(*not_located(exc))
        return error(405, "GET to read, POST to act")

    async def _read(self, parts: list[str], request: web.Request) -> web.Response:
        if parts == ["overview"]:
            data = await self.service.overview()
            if self.outcomes is not None:
                data["attempt_outcomes_since_start"] = dict(self.outcomes())
            return json_response(200, data)
        if parts == ["sagas"]:
            rows, missed = await self.service.sagas(Filters.parse(request.query))
            return json_response(200, self._with_unreached({"sagas": rows}, missed))
        if parts == ["blocked"]:
            limit = Filters.parse({"limit": request.query.get("limit", "100")}).limit
            summaries, missed = await self.service.blocked(limit)
            return json_response(200, self._with_unreached({"blocked": summaries}, missed))
        if len(parts) == 2 and parts[0] == "sagas" and SAGA_ID.fullmatch(parts[1]):
            view = await self.service.saga(parts[1])
            if view is None:
                return error(404, f"saga {parts[1]} not found")
            return json_response(200, view)
        return error(404, "no such endpoint")

    def _with_unreached(self, data: dict[str, Any], missed: Mapping[str, str]) -> dict[str, Any]:
        """With several stores, ``data`` and the stores that could not be read."""
        return {**data, "unreached": dict(missed)} if self.service.stores.several else data

    async def _act(
        self, parts: list[str], request: web.Request, principal: Principal
    ) -> web.Response:
        if not (len(parts) == 3 and parts[0] == "sagas" and parts[2] in ACTIONS):
            return error(404, "no such action")
        if not SAGA_ID.fullmatch(parts[1]):
            return error(404, "a saga id (or the start of one) is lower-case hex digits")
        if not principal.can_write:
            return error(403, self.guard.why_read_only(principal))
        # JSON only: another site's page cannot send it without a preflight (never answered)
        if request.content_type != "application/json":
            return error(415, "send the fields as application/json")
        if "origin" in request.headers and not self.guard.same_origin(request.headers):
            return error(403, "cross-origin request refused")
        try:
            fields = await json_fields(request)
        except BadInput as exc:
            return json_response(422, {"ok": False, "refused": "invalid", "error": str(exc)})
        status, answer = await run_action(self.service, parts[2], parts[1], fields, principal)
        return json_response(status, answer)

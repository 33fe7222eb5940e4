"""The console as one HTTP handler: /api (console.api), the pages and their forms, /login.

``Console(...)`` is served by ``effectusd run`` on its observability port (``[console]
enabled`` or ``run --console``), or alone by ``effectusd console`` (``serve``).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from urllib.parse import quote

from effectusd.backends import Backend
from effectusd.config import Config
from effectusd.console import pages
from effectusd.console.api import SAGA_ID, Api, OutcomeCounts, run_action
from effectusd.console.html import Html, esc, hidden, page, render, tag
from effectusd.console.http import (
    SECURITY_HEADERS,
    HttpServer,
    Request,
    Response,
    text_response,
)
from effectusd.console.security import Guard, Session
from effectusd.console.service import ACTIONS, BadInput, ConsoleService, Filters

FORM_TYPE = "application/x-www-form-urlencoded"
ACTION_PATH = re.compile(r"/sagas/([0-9a-f]{64})/([a-z-]+)")


def html_response(status: str, body: bytes, headers: Mapping[str, str] | None = None) -> Response:
    return Response(
        status, "text/html; charset=utf-8", body, {**SECURITY_HEADERS, **(headers or {})}
    )


def redirect(location: str, headers: Mapping[str, str] | None = None) -> Response:
    return html_response("303 See Other", b"", {"Location": location, **(headers or {})})


class Console:
    """Every console route; ``host`` is the address it listens on (for the bind check)."""

    def __init__(
        self,
        config: Config,
        backend: Backend,
        host: str,
        *,
        outcomes: OutcomeCounts | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.guard = Guard(config.console, host, environ)
        self.service = ConsoleService(config, backend)
        self.api = Api(self.service, self.guard, outcomes)
        self.outcomes = outcomes

    async def __call__(self, request: Request) -> Response:
        if not self.guard.host_ok(request):
            return text_response("421 Misdirected Request", "this console answers on loopback\n")
        if request.path == "/api" or request.path.startswith("/api/"):
            return await self.api.handle(request)
        if request.path in ("/login", "/logout"):
            return self._login(request) if request.path == "/login" else self._logout(request)
        session = self.guard.session(request)
        cookie = None
        if session is None and self.guard.loopback_only:
            cookie, session = self.guard.open_session(self.guard.anonymous)
        if session is None:
            if request.method == "GET":
                return redirect("/login")
            return html_response("403 Forbidden", page("Forbidden", tag("p", "Sign in first.")))
        response = await self._page(request, session)
        if cookie is not None:
            response.headers["Set-Cookie"] = self.guard.set_cookie(cookie)
        return response

    async def _page(self, request: Request, session: Session) -> Response:
        if request.method == "POST":
            return await self._form_action(request, session)
        if request.method != "GET":
            return text_response("405 Method Not Allowed", "GET or POST\n")
        who = self._who(session)
        path = request.path
        try:
            if path == "/":
                data = await self.service.overview()
                if self.outcomes is not None:
                    data["attempt_outcomes_since_start"] = dict(self.outcomes())
                return self._ok("Overview", pages.overview(data), who)
            if path == "/blocked":
                summaries = await self.service.blocked()
                return self._ok("Blocked work", pages.blocked(summaries, self._csrf(session)), who)
            if path == "/sagas":
                return await self._search(request, who)
        except BadInput as exc:
            return html_response("400 Bad Request", page("Bad request", tag("p", exc), who))
        match = re.fullmatch(r"/sagas/(.+)", path)
        if match and SAGA_ID.fullmatch(match.group(1)):
            view = await self.service.saga(match.group(1))
            if view is not None:
                did = request.query.get("did", "")
                notice = f"{did} recorded" if did in ACTIONS else ""
                body = pages.saga_detail(view, self._csrf(session), notice)
                return self._ok(f"Saga {view['plan_id']} / {view['execution_id']}", body, who)
        return html_response("404 Not Found", page("Not found", tag("p", "No such page."), who))

    async def _search(self, request: Request, who: str) -> Response:
        try:
            filters = Filters.parse(request.query)
        except BadInput as exc:
            body = pages.search(Filters(), None, str(exc))
            return html_response("400 Bad Request", page("Sagas", body, who))
        rows = await self.service.sagas(filters)
        return self._ok("Sagas", pages.search(filters, rows), who)

    async def _form_action(self, request: Request, session: Session) -> Response:
        """A form's action: CSRF token and origin first, then the same action as the API."""
        match = ACTION_PATH.fullmatch(request.path)
        if match is None or match.group(2) not in ACTIONS:
            return text_response("404 Not Found", "no such action\n")
        form = request.form() if self._is_form(request) else {}
        if not self.guard.same_origin(request) or not self.guard.csrf_ok(session, form.get("csrf")):
            body = page("Forbidden", tag("p", "The form is stale or from elsewhere; reload it."))
            return html_response("403 Forbidden", body)
        if not session.principal.can_write:
            body = page("Forbidden", tag("p", "Your token may read, not act."))
            return html_response("403 Forbidden", body)
        saga_id, action = match.group(1), match.group(2)
        status, answer = await run_action(self.service, action, saga_id, form, session.principal)
        if answer["ok"]:
            return redirect(f"/sagas/{saga_id}?did={quote(action)}")
        link = tag("a", "back to the saga", href=f"/sagas/{saga_id}")
        refused = Html(tag("p", answer["error"], class_="error") + tag("p", link))
        return html_response(status, page(f"{action} refused", refused, self._who(session)))

    def _login(self, request: Request) -> Response:
        if self.guard.loopback_only:
            return redirect("/")
        if request.method == "GET":
            return self._ok("Sign in", render("login.html", message=""), "")
        form = request.form() if self._is_form(request) else {}
        principal = self.guard.match_token(form.get("token", "")) if form.get("token") else None
        if principal is None or not self.guard.same_origin(request):
            message = tag("p", "That token is not valid here.", class_="error")
            body = page("Sign in", render("login.html", message=message))
            return html_response("401 Unauthorized", body)
        cookie, _ = self.guard.open_session(principal)
        return redirect("/", {"Set-Cookie": self.guard.set_cookie(cookie)})

    def _logout(self, request: Request) -> Response:
        session = self.guard.session(request)
        form = request.form() if self._is_form(request) else {}
        if (
            request.method != "POST"
            or session is None
            or not self.guard.csrf_ok(session, form.get("csrf"))
        ):
            return text_response("403 Forbidden", "sign out with the button\n")
        self.guard.close_session(request)
        return redirect("/login", {"Set-Cookie": self.guard.clear_cookie()})

    @staticmethod
    def _is_form(request: Request) -> bool:
        return request.headers.get("content-type", "").split(";")[0].strip() == FORM_TYPE

    @staticmethod
    def _csrf(session: Session) -> str:
        return session.csrf

    def _who(self, session: Session) -> Html:
        scope = "write" if session.principal.can_write else "read"
        text = esc(f"{session.principal.name} ({scope})")
        if self.guard.loopback_only:
            return text
        button = tag("button", "Sign out", type="submit")
        fields = Html(hidden({"csrf": session.csrf}) + button)
        out = tag("form", fields, method="post", action="/logout")
        return Html(text + " " + out)

    @staticmethod
    def _ok(title: str, body: Html, who: str) -> Response:
        return html_response("200 OK", page(title, body, who))


async def serve(
    config: Config, backend: Backend, host: str, port: int, ready: asyncio.Event | None = None
) -> None:
    """Serve the console alone until cancelled (``effectusd console``)."""
    server = HttpServer(Console(config, backend, host), "console")
    await server.start(host, port)
    if ready is not None:
        ready.set()
    try:
        await asyncio.Event().wait()
    finally:
        await server.close()

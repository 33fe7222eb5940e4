"""The console as one aiohttp handler: /api (console.api), the pages and their forms, /login.

``Console(...).install`` adds it to an aiohttp application: the daemon's observability
server when ``effectusd run`` composes them (``[console] enabled`` or ``run --console``), or
its own by ``effectusd console`` (``serve``).
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Callable, Mapping, Sequence
from urllib.parse import parse_qs, quote

from aiohttp import web

from effectusd.backends import Backend
from effectusd.config import Config
from effectusd.console import pages
from effectusd.console.api import SAGA_ID, Api, OutcomeCounts, not_located, run_action
from effectusd.console.html import Html, esc, hidden, page, render, tag
from effectusd.console.security import Guard, Session
from effectusd.console.service import ACTIONS, BadInput, ConsoleService, Filters
from effectusd.console.stores import NotLocated, Served, ServedStore
from effectusd.web import SECURITY_HEADERS, Install, WebServer, serve_until_cancelled, text_response

FORM_TYPE = "application/x-www-form-urlencoded"
ACTION_PATH = re.compile(r"/sagas/([0-9a-f]{1,64})/([a-z-]+)")


def html_response(
    status: int, body: bytes, headers: Mapping[str, str] | None = None
) -> web.Response:
    return web.Response(
        status=status,
        body=body,
        content_type="text/html",
        charset="utf-8",
        headers={**SECURITY_HEADERS, **(headers or {})},
    )


def redirect(location: str, headers: Mapping[str, str] | None = None) -> web.Response:
    return html_response(303, b"", {"Location": location, **(headers or {})})


async def form_fields(request: web.Request) -> dict[str, str]:
    """An application/x-www-form-urlencoded body, one value per name (the last); any other
    body is no fields. BadInput if it is not UTF-8, as a browser sends it."""
    if request.content_type != FORM_TYPE:
        return {}
    try:
        text = (await request.read()).decode("utf-8")
        fields = parse_qs(text, keep_blank_values=True, errors="strict")
    except UnicodeDecodeError:
        raise BadInput("the form's fields are not UTF-8 text") from None
    return {k: v[-1] for k, v in fields.items()}


def _too_many_sign_ins(wait: float) -> web.Response:
    seconds = max(1, math.ceil(wait))
    text = f"Too many sign-ins from here or with that token; try again in {seconds} s."
    body = page("Sign in", render("login.html", message=tag("p", text, class_="error")))
    return html_response(429, body, {"Retry-After": str(seconds)})


class Console:
    """Every console route over ``stores``: one backend (the single store), or each store of
    [database.stores] it serves; ``host`` is the address it listens on (for the bind check)."""

    def __init__(
        self,
        config: Config,
        stores: Backend | Sequence[ServedStore],
        host: str,
        *,
        outcomes: OutcomeCounts | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.guard = Guard(config.console, host, environ)
        served = stores if isinstance(stores, Sequence) else [Served(config, stores)]
        self.service = ConsoleService(config, served)
        self.api = Api(self.service, self.guard, outcomes)
        self.outcomes = outcomes
        self.schemas = {name: verb.result_schema for name, verb in config.verbs.items()}

    def install(self, app: web.Application) -> None:
        """Every path the application has no route for yet is the console's."""
        app.router.add_route("*", "/{path:.*}", self.handle)

    async def handle(self, request: web.Request) -> web.Response:
        if not self.guard.host_ok(request.headers):
            return text_response(421, "this console answers on loopback\n")
        if request.path == "/api" or request.path.startswith("/api/"):
            return await self.api.handle(request)
        try:
            return await self._handle_page(request)
        except BadInput as exc:  # a form that is not UTF-8
            return html_response(422, page("Bad request", tag("p", exc)))

    async def _handle_page(self, request: web.Request) -> web.Response:
        if request.path == "/login":
            return await self._login(request)
        if request.path == "/logout":
            return await self._logout(request)
        session = self.guard.session(request)
        if session is None:
            if request.method == "GET":
                return redirect("/login")
            return html_response(403, page("Forbidden", tag("p", "Sign in first.")))
        if request.method == "POST":
            return await self._form_action(request, session)
        if request.method != "GET":
            return text_response(405, "GET or POST\n")
        return await self._page(request, session)

    async def _page(self, request: web.Request, session: Session) -> web.Response:
        who = self._who(session)
        # no forms for a viewer who may not act: the pages say why instead
        csrf = session.csrf if session.principal.can_write else None
        why = self.guard.why_read_only(session.principal)
        path = request.path
        if path == "/":
            data = await self.service.overview()
            if self.outcomes is not None:
                data["attempt_outcomes_since_start"] = dict(self.outcomes())
            return self._ok("Overview", pages.overview(data), who)
        if path == "/blocked":
            summaries, missed = await self.service.blocked()
            body = pages.blocked(summaries, csrf, self.schemas, why)
            return self._ok("Blocked work", pages.with_unread(body, missed), who)
        if path == "/sagas":
            return await self._search(request, who)
        match = re.fullmatch(r"/sagas/(.+)", path)
        if match and SAGA_ID.fullmatch(match.group(1)):
            try:
                found = await self.service.saga_page(match.group(1))
            except NotLocated as exc:
                return self._not_located(exc, who)
            if found is not None:
                label, view, actions = found
                did = request.query.get("did", "")
                notice = f"{did} recorded" if did in ACTIONS else ""
                body = pages.saga_detail(view, csrf, notice, self.schemas, why, actions, label)
                return self._ok(f"Saga {view['plan_id']} / {view['execution_id']}", body, who)
        return html_response(404, page("Not found", tag("p", "No such page."), who))

    def _not_located(self, exc: NotLocated, who: str) -> web.Response:
        """A saga page no one saga answers to: not found, ambiguous (each candidate linked,
        with its store) or in a store that could not be searched."""
        if exc.kind == "not_found":
            return html_response(404, page("Not found", tag("p", "No such page."), who))
        status, _ = not_located(exc)
        return html_response(status, page("Which saga?", pages.not_located(exc), who))

    async def _search(self, request: web.Request, who: str) -> web.Response:
        try:
            filters = Filters.parse(request.query)
        except BadInput as exc:
            body = pages.search(Filters(), None, str(exc))
            return html_response(400, page("Sagas", body, who))
        rows, missed = await self.service.sagas(filters)
        return self._ok("Sagas", pages.with_unread(pages.search(filters, rows), missed), who)

    async def _form_action(self, request: web.Request, session: Session) -> web.Response:
        """A form's action: CSRF token and origin first, then the same action as the API."""
        match = ACTION_PATH.fullmatch(request.path)
        if match is None or match.group(2) not in ACTIONS:
            return text_response(404, "no such action\n")
        form = await form_fields(request)
        if not self.guard.same_origin(request.headers) or not self.guard.csrf_ok(
            session, form.get("csrf")
        ):
            body = page("Forbidden", tag("p", "The form is stale or from elsewhere; reload it."))
            return html_response(403, body)
        saga_id, action = match.group(1), match.group(2)
        who = self._who(session)
        back = tag("p", tag("a", "back to the saga", href=f"/sagas/{saga_id}"))
        if not session.principal.can_write:
            why = self.guard.why_read_only(session.principal)
            return html_response(403, page("Forbidden", Html(tag("p", why) + back), who))
        if "evidence" in form:  # a text box's lines are one statement: fold them to one line
            form["evidence"] = " ".join(form["evidence"].split())
        status, answer = await run_action(self.service, action, saga_id, form, session.principal)
        if answer["ok"]:
            return redirect(f"/sagas/{saga_id}?did={quote(action)}")
        refused = Html(tag("p", answer["error"], class_="error") + back)
        return html_response(status, page(f"{action} refused", refused, who))

    async def _login(self, request: web.Request) -> web.Response:
        if self.guard.loopback_only:
            return redirect("/")
        if request.method == "GET":
            return self._ok("Sign in", render("login.html", message=""), "")
        peer = request.remote or ""
        wait = self.guard.failed_sign_ins.wait(peer)
        if wait:
            return _too_many_sign_ins(wait)
        form = await form_fields(request)
        principal = self.guard.match_token(form.get("token", "")) if form.get("token") else None
        if principal is None or not self.guard.same_origin(request.headers):
            self.guard.failed_sign_ins.spend(peer)
            message = tag("p", "That token is not valid here.", class_="error")
            body = page("Sign in", render("login.html", message=message))
            return html_response(401, body)
        wait = self.guard.sign_ins.spend(principal.name)
        if wait:
            return _too_many_sign_ins(wait)
        cookie, _ = self.guard.open_session(principal)
        return redirect("/", {"Set-Cookie": self.guard.set_cookie(request, cookie)})

    async def _logout(self, request: web.Request) -> web.Response:
        session = self.guard.session(request)
        form = await form_fields(request)
        if (
            request.method != "POST"
            or session is None
            or not self.guard.csrf_ok(session, form.get("csrf"))
        ):
            return text_response(403, "sign out with the button\n")
        self.guard.close_session(request)
        return redirect("/login", {"Set-Cookie": self.guard.clear_cookie(request)})

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
    def _ok(title: str, body: Html, who: str) -> web.Response:
        return html_response(200, page(title, body, who))


def for_daemon(config: Config, backend: Backend) -> Callable[[OutcomeCounts], Install] | None:
    """What `effectusd run` adds to its observability server: the console, when enabled
    there (called with the daemon's outcome counts, it checks the console's tokens and bind
    and answers the routes to install; ConfigError if they are unsafe)."""
    if not config.console.enabled or config.observability.http_port is None:
        return None

    def console(outcomes: OutcomeCounts) -> Install:
        host = config.observability.http_host
        return Console(config, backend, host, outcomes=outcomes).install

    return console


async def serve(
    config: Config,
    stores: Sequence[ServedStore],
    host: str,
    port: int,
    ready: asyncio.Event | None = None,
) -> None:
    """Serve the console alone until cancelled (``effectusd console``), over ``stores``."""
    server = WebServer("console", Console(config, stores, host).install)
    await serve_until_cancelled(server, host, port, ready)

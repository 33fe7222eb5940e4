"""Who may use the console, and the checks every request passes (docs/operations.md section 8).

* Tokens live in environment variables the config names (``[console.tokens.NAME]``); they
  are read once at start and compared in constant time. ``read`` tokens read; ``write``
  tokens also act. An action is recorded as done by ``console:NAME`` (and the operator's own
  name when the form or the JSON gives one).
* Without tokens the console binds only to loopback, reads, and acts only when
  ``loopback_actions`` says so; its Host header must then name loopback, so that a web page
  whose DNS name is rebound to 127.0.0.1 cannot read it through the operator's browser.
* The API takes ``Authorization: Bearer TOKEN`` and never a cookie, so no other site can make
  a browser call it with the operator's session. An API action must be JSON, which a page on
  another origin cannot send without a preflight we never answer.
* Pages use a session cookie (HttpOnly, SameSite=Strict) made at login; every form carries
  the session's CSRF token and its Origin (or Referer) must be the console's own.

No token and no session id is ever logged or repeated in an error.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from http.cookies import SimpleCookie
from urllib.parse import urlsplit

from effectusd.config import ConfigError, ConsoleConfig
from effectusd.console.http import Request

COOKIE = "effectusd_console"
MIN_TOKEN_CHARS = 16
MAX_SESSIONS = 1_000  # the oldest go first; a console has a handful of operators
ANONYMOUS = "loopback"  # the name of whoever uses a console that has no tokens


@dataclass(frozen=True)
class Principal:
    """Who a request acts as: a token's name (or ``loopback``) and what it may do."""

    name: str
    can_write: bool

    def actor(self, operator: str | None = None) -> str:
        """``console:NAME``, plus the operator's own name when one was given."""
        who = " ".join((operator or "").split())[:64]
        return f"console:{self.name}" + (f"/{who}" if who else "")


def is_loopback(host: str) -> bool:
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The host of a Host header value (without its port)."""
    return urlsplit(f"//{header}").hostname or ""


@dataclass(frozen=True)
class _Token:
    name: str
    can_write: bool
    digest: bytes


def load_tokens(console: ConsoleConfig, environ: Mapping[str, str]) -> list[_Token]:
    """The configured tokens, read from their variables; ConfigError naming the key (never
    the value) when one is missing or too short to be a secret."""
    tokens = []
    for name, token in console.tokens.items():
        key = f"console.tokens.{name}.env"
        value = environ.get(token.env, "")
        if not value:
            raise ConfigError(f"{key}: environment variable {token.env} is not set or empty")
        if len(value) < MIN_TOKEN_CHARS:
            raise ConfigError(
                f"{key}: the token in {token.env} is shorter than {MIN_TOKEN_CHARS} characters"
            )
        tokens.append(_Token(name, token.scope == "write", _digest(value)))
    return tokens


def check_bind(console: ConsoleConfig, host: str) -> None:
    """Refuse a console reachable beyond this machine that anyone could use."""
    if not console.tokens and not is_loopback(host):
        raise ConfigError(
            f"console.tokens: the console would listen on {host}, which is not loopback; "
            "configure a token (console.tokens.NAME.env names its environment variable) "
            "or bind to 127.0.0.1"
        )


def _digest(value: str) -> bytes:
    # Compared as digests: equal lengths, and what a timing difference could reveal is a
    # hash of the secret, not the secret.
    return hashlib.sha256(value.encode("utf-8", errors="surrogateescape")).digest()


@dataclass
class Session:
    principal: Principal
    csrf: str
    expires: float  # time.monotonic()


class Guard:
    """Authentication, sessions and the CSRF and origin checks of one console."""

    def __init__(
        self, console: ConsoleConfig, host: str, environ: Mapping[str, str] | None = None
    ) -> None:
        check_bind(console, host)
        self.tokens = load_tokens(console, os.environ if environ is None else environ)
        self.loopback_only = not self.tokens
        self.anonymous = Principal(ANONYMOUS, console.loopback_actions)
        self.ttl = console.session_ttl.total_seconds()
        self._sessions: dict[bytes, Session] = {}

    # -- credentials ---------------------------------------------------------------------
    def match_token(self, presented: str) -> Principal | None:
        """The principal of a presented token; every configured token is compared."""
        digest = _digest(presented)
        found = None
        for token in self.tokens:
            if hmac.compare_digest(digest, token.digest) and found is None:
                found = Principal(token.name, token.can_write)
        return found

    def bearer(self, request: Request) -> Principal | None:
        """The principal of an API request: its bearer token, or anonymous without tokens."""
        if self.loopback_only:
            return self.anonymous
        scheme, _, presented = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            return None
        return self.match_token(presented.strip())

    # -- sessions (pages) --------------------------------------------------------------------
    def open_session(self, principal: Principal) -> tuple[str, Session]:
        """A new session and the cookie value that names it."""
        if len(self._sessions) >= MAX_SESSIONS:
            oldest = min(self._sessions, key=lambda key: self._sessions[key].expires)
            del self._sessions[oldest]
        cookie = secrets.token_urlsafe(32)
        session = Session(principal, secrets.token_urlsafe(32), time.monotonic() + self.ttl)
        self._sessions[_digest(cookie)] = session
        return cookie, session

    def session(self, request: Request) -> Session | None:
        cookie = self._cookie(request)
        if cookie is None:
            return None
        key = _digest(cookie)
        session = self._sessions.get(key)
        if session is not None and session.expires < time.monotonic():
            del self._sessions[key]
            return None
        return session

    def close_session(self, request: Request) -> None:
        cookie = self._cookie(request)
        if cookie is not None:
            self._sessions.pop(_digest(cookie), None)

    @staticmethod
    def _cookie(request: Request) -> str | None:
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(request.headers.get("cookie", ""))
        except Exception:  # noqa: BLE001 - a malformed Cookie header is no session
            return None
        morsel = jar.get(COOKIE)
        return morsel.value if morsel is not None else None

    def set_cookie(self, cookie: str) -> str:
        return f"{COOKIE}={cookie}; Path=/; HttpOnly; SameSite=Strict; Max-Age={int(self.ttl)}"

    @staticmethod
    def clear_cookie() -> str:
        return f"{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"

    # -- request checks -----------------------------------------------------------------------
    def host_ok(self, request: Request) -> bool:
        """Without tokens, only a request to a loopback name is answered (DNS rebinding)."""
        return not self.loopback_only or is_loopback(host_name(request.headers.get("host", "")))

    @staticmethod
    def same_origin(request: Request) -> bool:
        """The request's Origin (else its Referer) names this console's own host and port."""
        host = request.headers.get("host", "")
        source = request.headers.get("origin") or request.headers.get("referer") or ""
        parts = urlsplit(source)
        return bool(host) and parts.scheme in ("http", "https") and parts.netloc == host

    @staticmethod
    def csrf_ok(session: Session, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(
            presented.encode("utf-8", errors="replace"), session.csrf.encode()
        )

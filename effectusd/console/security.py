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
  the session's CSRF token and its Origin (or Referer) must be the console's own. The cookie
  is named after the port the console listens on, so two consoles on one host keep their own,
  and names a session of this process only: sessions live in memory, keyed by a keyed hash
  under a secret drawn when the process starts. Browsers send loopback cookies to every port
  of the host, so any local program a browser visits can see it; docs/operations.md section
  8 says what that means and what to put in front on a shared machine.
* The console without tokens makes no sessions at all: everyone on loopback is the same
  ``loopback`` principal, and its forms carry a CSRF token derived from the process secret.

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
from urllib.parse import urlsplit

from aiohttp import web

from effectusd.config import ConfigError, ConsoleConfig

COOKIE_PREFIX = "effectusd_console_"
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
    """The host of a Host header value (without its port); empty when it names none."""
    try:
        return urlsplit(f"//{header}").hostname or ""
    except ValueError:  # an unclosed [ of an IPv6 address
        return ""


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


def local_port(request: web.Request) -> int:
    """The port the request came in on: the one this console listens on."""
    sockname = request.transport.get_extra_info("sockname") if request.transport else None
    return int(sockname[1]) if sockname else 0


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
        self._secret = secrets.token_bytes(32)  # this process's: its sessions die with it
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

    def bearer(self, headers: Mapping[str, str]) -> Principal | None:
        """The principal of an API request: its bearer token, or anonymous without tokens."""
        if self.loopback_only:
            return self.anonymous
        scheme, _, presented = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            return None
        return self.match_token(presented.strip())

    def why_read_only(self, principal: Principal) -> str:
        """Why ``principal`` may not act, in the words of what would change it."""
        if self.loopback_only:
            return "this console acts only with loopback_actions = true in its [console] section"
        return f"the token {principal.name!r} may read, not act (its scope is read)"

    # -- sessions (pages) --------------------------------------------------------------------
    def _key(self, cookie: str) -> bytes:
        return hmac.new(self._secret, cookie.encode("utf-8", "surrogateescape"), "sha256").digest()

    def open_session(self, principal: Principal) -> tuple[str, Session]:
        """A new session and the cookie value that names it."""
        if len(self._sessions) >= MAX_SESSIONS:
            oldest = min(self._sessions, key=lambda key: self._sessions[key].expires)
            del self._sessions[oldest]
        cookie = secrets.token_urlsafe(32)
        session = Session(principal, secrets.token_urlsafe(32), time.monotonic() + self.ttl)
        self._sessions[self._key(cookie)] = session
        return cookie, session

    def session(self, request: web.Request) -> Session | None:
        """The request's session: the one its cookie names, or, without tokens, everyone's."""
        if self.loopback_only:
            csrf = hmac.new(self._secret, b"csrf:loopback", "sha256").hexdigest()
            return Session(self.anonymous, csrf, float("inf"))
        cookie = self._cookie(request)
        if cookie is None:
            return None
        key = self._key(cookie)
        session = self._sessions.get(key)
        if session is not None and session.expires < time.monotonic():
            del self._sessions[key]
            return None
        return session

    def close_session(self, request: web.Request) -> None:
        cookie = self._cookie(request)
        if cookie is not None:
            self._sessions.pop(self._key(cookie), None)

    @staticmethod
    def cookie_name(request: web.Request) -> str:
        return f"{COOKIE_PREFIX}{local_port(request)}"

    def _cookie(self, request: web.Request) -> str | None:
        # aiohttp's parser skips a pair it cannot read (another local app's JSON value)
        # instead of giving up on the whole header
        return request.cookies.get(self.cookie_name(request))

    def set_cookie(self, request: web.Request, cookie: str) -> str:
        name = self.cookie_name(request)
        return f"{name}={cookie}; Path=/; HttpOnly; SameSite=Strict; Max-Age={int(self.ttl)}"

    def clear_cookie(self, request: web.Request) -> str:
        return f"{self.cookie_name(request)}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"

    # -- request checks -----------------------------------------------------------------------
    def host_ok(self, headers: Mapping[str, str]) -> bool:
        """Without tokens, only a request to a loopback name is answered (DNS rebinding)."""
        return not self.loopback_only or is_loopback(host_name(headers.get("host", "")))

    @staticmethod
    def same_origin(headers: Mapping[str, str]) -> bool:
        """The request's Origin (else its Referer) names this console's own host and port."""
        host = headers.get("host", "")
        source = headers.get("origin") or headers.get("referer") or ""
        try:
            parts = urlsplit(source)
        except ValueError:  # an unclosed [ of an IPv6 address
            return False
        return bool(host) and parts.scheme in ("http", "https") and parts.netloc == host

    @staticmethod
    def csrf_ok(session: Session, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(
            presented.encode("utf-8", errors="replace"), session.csrf.encode()
        )

"""Who may use the console, and the checks every request passes (docs/operations.md section 8).

* Tokens live in environment variables the config names (``[console.tokens.NAME]``); they
  are read once at start (one shorter than MIN_TOKEN_CHARS, or with fewer than
  MIN_DISTINCT_CHARS different characters, is refused) and compared in constant time.
  ``read`` tokens read; ``write`` tokens also act. An action is recorded as done by
  ``console:NAME`` (and the operator's own name when the form or the JSON gives one).
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
  under a secret drawn when the process starts. A request that carries the console's cookie
  twice (one of them set by another local program) is not signed in. Each token name keeps
  at most MAX_SESSIONS_PER_TOKEN sessions, its oldest going first: signing in with one
  token never signs out a holder of another.
* ``/login`` is rate-limited (console.limits): failed sign-ins per peer address, sign-ins
  per token name. Browsers send loopback cookies to every port
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
from effectusd.console.limits import Buckets

COOKIE_PREFIX = "effectusd_console_"
MIN_TOKEN_CHARS = 32
MIN_DISTINCT_CHARS = 16
MAX_SESSIONS_PER_TOKEN = 100  # the name's oldest go first; a console has a few operators
# /login: each peer may fail 10 times at once, then once every 6 s; each token name may
# sign in 10 times at once, then once every 6 s. Past either: 429 with Retry-After.
SIGN_IN_BURST = 10
SIGN_IN_EVERY_S = 6.0
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
    """The configured tokens, read from their variables; ConfigError naming the key and the
    variable (never the value) when one is missing or too weak to be a secret."""
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
        if len(set(value)) < MIN_DISTINCT_CHARS:
            raise ConfigError(
                f"{key}: the token in {token.env} has fewer than {MIN_DISTINCT_CHARS} "
                "different characters (openssl rand -base64 32 makes one)"
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
        self.failed_sign_ins = Buckets(SIGN_IN_BURST, SIGN_IN_EVERY_S)  # by peer address
        self.sign_ins = Buckets(SIGN_IN_BURST, SIGN_IN_EVERY_S)  # by token name

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
        """A new session and the cookie value that names it; the principal's expired
        sessions, and its oldest when it has MAX_SESSIONS_PER_TOKEN, go."""
        now = time.monotonic()
        mine = [k for k, s in self._sessions.items() if s.principal.name == principal.name]
        for key in [k for k in mine if self._sessions[k].expires < now]:
            del self._sessions[key]
            mine.remove(key)
        if len(mine) >= MAX_SESSIONS_PER_TOKEN:
            del self._sessions[min(mine, key=lambda key: self._sessions[key].expires)]
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
        """The console's cookie, unless the request carries it more than once: which of two
        is the real one cannot be told, and another local program can add one."""
        name = self.cookie_name(request)
        pairs = ";".join(request.headers.getall("Cookie", ())).split(";")
        if sum(pair.partition("=")[0].strip() == name for pair in pairs) != 1:
            return None
        # aiohttp's parser skips a pair it cannot read (another local app's JSON value)
        # instead of giving up on the whole header
        return request.cookies.get(name)

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

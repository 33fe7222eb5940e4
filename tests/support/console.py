"""Helpers for console tests: a console served in-process, and its tokens."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx

from effectusd.config import Config, ConsoleConfig
from effectusd.console import Console, for_daemon
from effectusd.dispatcher.daemon import Daemon
from effectusd.store.sql import store_backend
from effectusd.web import WebServer
from tests.support.harness import daemon_running

WRITE_TOKEN = "write-token-0123456789abcdefghijklmnop"
READ_TOKEN = "read-token-0123456789abcdefghijklmnop"
TOKEN_ENV = {"CONSOLE_WRITE": WRITE_TOKEN, "CONSOLE_READ": READ_TOKEN}
TOKENS = {
    "oncall": {"env": "CONSOLE_WRITE", "scope": "write"},
    "dashboard": {"env": "CONSOLE_READ", "scope": "read"},
}
CSRF_FIELD = re.compile(r'name="csrf" value="([^"]+)"')


def with_console(config: Config, **console: Any) -> Config:
    """``config`` with its [console] section replaced by ``console``."""
    return config.model_copy(
        update={"console": ConsoleConfig.model_validate({"enabled": True, **console})}
    )


@contextlib.asynccontextmanager
async def console_running(
    config: Config, url: str, host: str = "127.0.0.1", environ: Mapping[str, str] = TOKEN_ENV
) -> AsyncIterator[str]:
    """Serve a console on 127.0.0.1 (``host``: the address it believes it binds, for the
    bind check); yields its base URL."""
    server = WebServer(
        "console", Console(config, store_backend(url), host, environ=environ).install
    )
    port = await server.start("127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await server.close()


def daemon_with_console(config: Config, url: str) -> AbstractAsyncContextManager[Daemon]:
    """A daemon serving the console on its observability port, composed as `effectusd run`
    composes them (the console's tokens come from the environment)."""
    return daemon_running(config, url, web=for_daemon(config, store_backend(url)))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def login(http: httpx.AsyncClient, token: str) -> None:
    """Sign a client in through the login form (its cookie jar keeps the session)."""
    response = await http.post(
        "/login", data={"token": token}, headers={"Origin": str(http.base_url).rstrip("/")}
    )
    assert response.status_code == 303, response.text


def csrf_of(page: str) -> str:
    match = CSRF_FIELD.search(page)
    assert match is not None, "no CSRF field on the page"
    return match.group(1)

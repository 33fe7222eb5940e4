"""Sign-in on a shared host: one token's sign-ins never sign out another token's holder,
/login is rate-limited per peer and per token name, a weak token stops the console at start,
and a console cookie sent twice signs no one in."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from effectusd.config import Config
from effectusd.console import security
from tests.integration.test_operator import cli, config_file
from tests.support.console import (
    READ_TOKEN,
    TOKENS,
    WRITE_TOKEN,
    console_running,
    login,
    with_console,
)
from tests.support.harness import make_config

pytestmark = pytest.mark.postgres


def _config() -> Config:
    return with_console(make_config("http://127.0.0.1:9", {"pay": {}}), tokens=TOKENS)


def _config_file(tmp_path: Path, enabled: bool) -> Path:
    """The TOML file of ``_config``: its [console] section with the two tokens."""
    path = config_file(tmp_path, make_config("http://127.0.0.1:9", {"pay": {}}))
    tables = [("oncall", "CONSOLE_WRITE", "write"), ("dashboard", "CONSOLE_READ", "read")]
    with path.open("a", encoding="utf-8") as toml:
        toml.write(f"\n[console]\nenabled = {str(enabled).lower()}\n")
        for name, env, scope in tables:
            toml.write(f'[console.tokens.{name}]\nenv = "{env}"\nscope = "{scope}"\n')
    return path


async def _sign_in(http: httpx.AsyncClient, token: str) -> httpx.Response:
    origin = str(http.base_url).rstrip("/")
    return await http.post("/login", data={"token": token}, headers={"Origin": origin})


async def test_a_thousand_sign_ins_with_the_read_token_leave_the_write_session_signed_in(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the rate limit is tested below
    monkeypatch.setattr(security, "SIGN_IN_BURST", 10_000)
    async with console_running(_config(), db) as base:
        async with httpx.AsyncClient(base_url=base) as oncall:
            await login(oncall, WRITE_TOKEN)
            async with httpx.AsyncClient(base_url=base) as first_reader:
                await login(first_reader, READ_TOKEN)
                async with httpx.AsyncClient(base_url=base) as reader:
                    for _ in range(1_000):
                        assert (await _sign_in(reader, READ_TOKEN)).status_code == 303
                        reader.cookies.clear()
                    await login(reader, READ_TOKEN)
                    last_reader = await reader.get("/blocked")
                first = await first_reader.get("/blocked")
            oncall_page = await oncall.get("/blocked")
    assert oncall_page.status_code == 200 and "oncall (write)" in oncall_page.text
    assert last_reader.status_code == 200
    assert first.status_code == 303  # the read token's oldest session made room, not oncall's


async def test_failed_sign_ins_from_one_peer_are_limited_with_retry_after(db: str) -> None:
    async with console_running(_config(), db) as base:
        async with httpx.AsyncClient(base_url=base) as http:
            failed = [
                (await _sign_in(http, "not-the-token-" * 3)).status_code
                for _ in range(security.SIGN_IN_BURST)
            ]
            limited = await _sign_in(http, "not-the-token-" * 3)
            right_token = await _sign_in(http, WRITE_TOKEN)
    assert failed == [401] * security.SIGN_IN_BURST
    assert limited.status_code == 429
    assert 1 <= int(limited.headers["Retry-After"]) <= security.SIGN_IN_EVERY_S
    assert right_token.status_code == 429  # the peer's limit is checked before the token


async def test_sign_ins_are_limited_per_token_name_and_one_name_cannot_use_up_another(
    db: str,
) -> None:
    async with console_running(_config(), db) as base:
        async with httpx.AsyncClient(base_url=base) as http:
            signed_in = []
            for _ in range(security.SIGN_IN_BURST):
                signed_in.append((await _sign_in(http, READ_TOKEN)).status_code)
                http.cookies.clear()
            limited = await _sign_in(http, READ_TOKEN)
            oncall = await _sign_in(http, WRITE_TOKEN)
    assert signed_in == [303] * security.SIGN_IN_BURST
    assert limited.status_code == 429 and "Retry-After" in limited.headers
    assert READ_TOKEN not in limited.text
    assert oncall.status_code == 303


async def test_a_request_carrying_the_console_cookie_twice_is_not_signed_in(db: str) -> None:
    """Another local program can add a cookie of the console's name after the real one."""
    async with console_running(_config(), db) as base:
        async with httpx.AsyncClient(base_url=base) as http:
            await login(http, READ_TOKEN)
            [(name, value)] = http.cookies.items()
            alone = await http.get("/blocked")
            http.cookies.clear()
            async with httpx.AsyncClient(base_url=base) as other:
                await login(other, WRITE_TOKEN)
                [(_, planted)] = other.cookies.items()
            cookies = {"Cookie": f"{name}={value}; {name}={planted}"}
            twice = await http.get("/blocked", headers=cookies)
            reversed_ = await http.get(
                "/blocked", headers={"Cookie": f"{name}={planted}; {name}={value}"}
            )
            two_headers = await http.get(
                "/blocked", headers=[("Cookie", f"{name}={value}"), ("Cookie", f"{name}={planted}")]
            )
    assert alone.status_code == 200
    assert [r.status_code for r in (twice, reversed_, two_headers)] == [303, 303, 303]


@pytest.mark.parametrize(
    "weak",
    ["a" * 40, "0123456789abcdefghijklmnopqrstu", "abababababababababababababababababab"],
    ids=["one-character", "31-characters", "two-characters"],
)
def test_a_weak_console_token_stops_the_console_at_start_naming_the_variable(
    db: str, tmp_path: Path, weak: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run --console` (`effectusd console` builds the same Console) before any work."""
    monkeypatch.setenv("CONSOLE_READ", READ_TOKEN)
    monkeypatch.setenv("CONSOLE_WRITE", weak)
    command = ("run", "--until-idle", "--console", "--http-port", "0")
    result = cli(_config_file(tmp_path, enabled=False), db, *command)
    lines = result.output.strip().splitlines()
    assert result.exit_code == 3, result.output
    assert len(lines) == 1 and "CONSOLE_WRITE" in lines[0]
    assert weak not in result.output


def test_a_daemon_without_the_console_starts_whatever_its_tokens(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONSOLE_READ", READ_TOKEN)
    monkeypatch.setenv("CONSOLE_WRITE", "a" * 16)
    result = cli(_config_file(tmp_path, enabled=False), db, "run", "--until-idle")
    assert result.exit_code == 0, result.output

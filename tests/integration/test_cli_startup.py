"""`effectusd run` that cannot start ends, on either store, with one line on stderr and its
documented exit code, within the database URL's connect_timeout plus five seconds: never a
hang, never a traceback. Each case runs the real command line as a process of its own."""

from __future__ import annotations

import functools
import os
import re
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import migrated_sqlite

CONNECT_TIMEOUT_S = 2  # the PostgreSQL URLs' connect_timeout
BOUND_S = CONNECT_TIMEOUT_S + 5  # past what starting the interpreter and importing costs
IMPORTS = "import effectusd.cli, effectusd.console, effectusd.dispatcher.daemon"

CONFIG = """
[database]
pool_min_size = 1
[destinations.dest]
base_url = "{scheme}://127.0.0.1:9"
{destination}
[verbs.do]
destination = "dest"
path = "/do"
"""


@functools.cache
def start_cost_s() -> float:
    """Twice what starting the interpreter and importing the daemon take on this machine now
    (a loaded machine takes seconds): the bound is on what comes after."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", IMPORTS], check=True, timeout=120)
    return 2 * (time.monotonic() - started)


def run_daemon(url: str, config: Path, *args: str) -> tuple[int, list[str]]:
    """`effectusd run` as a process of its own: its exit code and its stderr's lines."""
    return run_cli(url, config, "run", *args)


def run_cli(url: str, config: Path, command: str, *args: str) -> tuple[int, list[str]]:
    """A command that serves (run, console) as a process of its own, logging warnings and
    errors only: its exit code and its stderr's lines. It must have exited within BOUND_S
    (past its start)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EFFECTUSD_")}
    env["EFFECTUSD_DATABASE_URL"] = url
    program = [sys.executable, "-m", "effectusd.cli", "--config", str(config), command]
    try:
        done = subprocess.run(
            [*program, "--log-level", "WARNING", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=BOUND_S + start_cost_s(),
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as hung:
        pytest.fail(f"still running after {hung.timeout:.1f}s; stderr: {hung.stderr!r}")
    return done.returncode, done.stderr.strip().splitlines()


def write_config(tmp_path: Path, destination: str = "", scheme: str = "http") -> Path:
    path = tmp_path / "effectusd.toml"
    path.write_text(CONFIG.format(destination=destination, scheme=scheme))
    return path


@pytest.fixture(params=[pytest.param("postgres", marks=pytest.mark.postgres), "sqlite"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def migrated(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if kind == "sqlite":
        return migrated_sqlite(tmp_path)
    url: str = request.getfixturevalue("db")
    return f"{url}?connect_timeout={CONNECT_TIMEOUT_S}"


@pytest.fixture
def held_port() -> Iterator[int]:
    """A loopback port something else is listening on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def test_run_on_a_port_in_use_exits_3_in_one_line_after_its_pool_opened(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, held_port: int
) -> None:
    # The store (on PostgreSQL a pool of one connection, which the loops started beside it
    # make grow) is open before the port is bound: the failure must close it.
    url = migrated(kind, request, tmp_path)

    code, lines = run_daemon(url, write_config(tmp_path), "--http-port", str(held_port))

    assert code == 3, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: cannot serve on 127.0.0.1:{held_port}: ")


def test_console_on_a_port_in_use_exits_3_in_one_line(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, held_port: int
) -> None:
    url = migrated(kind, request, tmp_path)

    code, lines = run_cli(url, write_config(tmp_path), "console", "--port", str(held_port))

    assert code == 3, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: cannot serve on 127.0.0.1:{held_port}: ")
    assert "--port (console.port)" in lines[0]


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port that accepts connections and never answers (a host that hangs)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield server.getsockname()[1]


def test_run_on_an_unreachable_store_exits_1_in_one_line(
    kind: str, tmp_path: Path, silent_server: int
) -> None:
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'missing.db'}"
    else:
        url = (
            f"postgresql://postgres@127.0.0.1:{silent_server}/x?connect_timeout={CONNECT_TIMEOUT_S}"
        )

    code, lines = run_daemon(url, write_config(tmp_path))

    assert code == 1, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: cannot connect to the database: ")
    if kind == "postgres":  # the failure's class (ConnectionTimeout), not the driver's text
        assert re.fullmatch(r"error: cannot connect to the database: [A-Za-z]+", lines[0])
    else:
        assert "does not exist" in lines[0]


def test_run_on_a_store_without_the_schema_exits_6_in_one_line(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if kind == "sqlite":
        path = tmp_path / "empty.db"
        sqlite3.connect(path).close()
        url = f"sqlite:///{path}"
    else:
        url = request.getfixturevalue("empty_database")

    code, lines = run_daemon(url, write_config(tmp_path))

    assert code == 6, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ") and "run `effectusd migrate`" in lines[0]


@pytest.mark.parametrize(
    ("contents", "reason"),
    [(None, "cannot be read"), (b"not a certificate\n", "holds no certificate")],
    ids=["missing", "not-a-certificate"],
)
def test_run_with_an_unreadable_ca_file_exits_3_in_one_line_naming_the_key(
    kind: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    contents: bytes | None,
    reason: str,
) -> None:
    url = migrated(kind, request, tmp_path)
    ca_file = tmp_path / "ca.pem"
    if contents is not None:
        ca_file.write_bytes(contents)
    config = write_config(tmp_path, f'ca_file = "{ca_file}"', scheme="https")

    code, lines = run_daemon(url, config, "--http-port", "0")

    assert code == 3, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: destinations.dest.ca_file: {reason}")

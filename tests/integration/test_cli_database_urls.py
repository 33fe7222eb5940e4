"""A malformed PostgreSQL URL, however it is given (--database-url, EFFECTUSD_DATABASE_URL or
the config file's [database] url), ends every command that reads one with exit 3 and one fixed
line: never a traceback, never the password or any other part of the URL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from effectusd.cli import main
from tests.integration.test_cli_plans_and_sagas import EXAMPLE_CONFIG, EXAMPLE_PLAN, VECTOR_SAGA_ID

SECRET = "Hunter2-s3cr3t"
MALFORMED = {
    "unencoded-percent": f"postgresql://shop:{SECRET}%zz@127.0.0.1:5432/shop",
    "percent-at-the-end": f"postgresql://shop:{SECRET}%@127.0.0.1:5432/shop",
    "unclosed-bracket": f"postgresql://shop:{SECRET}@[127.0.0.1:5432/shop",
    "space-in-a-keyword-value": f"host=127.0.0.1 user=shop password={SECRET} x dbname=shop",
    "unterminated-quote": f"host=127.0.0.1 user=shop password='{SECRET} dbname=shop",
    "unknown-parameter": f"postgresql://shop:{SECRET}@127.0.0.1:5432/shop?sslmdoe=require",
}
# Every command of `effectusd --help` that uses the database (all but check, which reads the
# config file only: it refuses a URL libpq cannot parse, as loading the file does, and never
# asks libpq about the URL's parameter names).
COMMANDS = {
    "run": ["run", "--until-idle"],
    "migrate": ["migrate"],
    "migrate-check": ["migrate", "--check"],
    "sagas-list": ["sagas", "list"],
    "sagas-show": ["sagas", "show", VECTOR_SAGA_ID],
    "submit": ["submit", str(EXAMPLE_PLAN), "--execution-id", "o-1"],
    "resolve": ["resolve", VECTOR_SAGA_ID, "reserve", "--committed", "--evidence", "seen"],
    "retry": ["retry", VECTOR_SAGA_ID],
    "cancel": ["cancel", VECTOR_SAGA_ID],
    "adopt-contract": ["adopt-contract", VECTOR_SAGA_ID, "--evidence", "seen"],
    "prune": ["prune", "--older-than", "30d"],
    "console": ["console", "--port", "0"],
    "bench": ["bench", "--sagas", "1", "--backlog", "0"],
}
SOURCES = ["option", "environment", "config-file"]


def config_with_url(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "effectusd.toml"
    example = EXAMPLE_CONFIG.read_text()
    assert example.count('\nurl = "sqlite:///effectusd.db"') == 1
    path.write_text(
        example.replace('\nurl = "sqlite:///effectusd.db"', f"\nurl = {json.dumps(url)}")
    )
    return path


def arguments(source: str, url: str, tmp_path: Path) -> tuple[list[str], dict[str, str | None]]:
    """The global options and the environment that give ``url`` by ``source``."""
    config = config_with_url(tmp_path, url) if source == "config-file" else EXAMPLE_CONFIG
    options = ["--config", str(config)]
    env: dict[str, str | None] = {"EFFECTUSD_CONFIG": None, "EFFECTUSD_DATABASE_URL": None}
    if source == "option":
        options += ["--database-url", url]
    elif source == "environment":
        env["EFFECTUSD_DATABASE_URL"] = url
    return options, env


@pytest.mark.parametrize("shape", list(MALFORMED))
@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_malformed_database_url_exits_3_in_one_line_never_quoting_it(
    command: str, source: str, shape: str, tmp_path: Path
) -> None:
    options, env = arguments(source, MALFORMED[shape], tmp_path)

    result = CliRunner().invoke(main, [*options, *COMMANDS[command]], env=env)

    assert result.exit_code == 3, (result.output, result.exception)
    assert isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "PostgreSQL database URL: " in lines[0], lines
    for part in (SECRET, "shop", "127.0.0.1", "sslmdoe"):
        assert part not in result.output


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("command", [["run", "--until-idle"], ["migrate"]])
def test_a_malformed_database_url_never_reaches_a_real_process_output(
    command: list[str], source: str, tmp_path: Path
) -> None:
    options, overrides = arguments(source, MALFORMED["unencoded-percent"], tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("EFFECTUSD_")}
    env.update({k: v for k, v in overrides.items() if v is not None})

    done = subprocess.run(
        [sys.executable, "-m", "effectusd.cli", *options, *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )

    assert done.returncode == 3, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert SECRET not in done.stdout + done.stderr

"""A malformed PostgreSQL URL, however it is given (--database-url, EFFECTUSD_DATABASE_URL or
the config file's [database] url; with several stores LABEL=URL in either, or a
[database.stores.LABEL] url), ends every command that reads one with exit 3 and one fixed
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


def refusal_line(options: list[str], env: dict[str, str | None], command: list[str]) -> str:
    """The one line a command given a malformed URL exits 3 with; it quotes no part of it."""
    result = CliRunner().invoke(main, [*options, *command], env=env)

    assert result.exit_code == 3, (result.output, result.exception)
    assert isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    for part in (SECRET, "shop", "127.0.0.1", "sslmdoe"):
        assert part not in result.output
    return lines[0]


@pytest.mark.parametrize("shape", list(MALFORMED))
@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_malformed_database_url_exits_3_in_one_line_never_quoting_it(
    command: str, source: str, shape: str, tmp_path: Path
) -> None:
    options, env = arguments(source, MALFORMED[shape], tmp_path)

    line = refusal_line(options, env, COMMANDS[command])

    assert "PostgreSQL database URL: " in line


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("command", [["run", "--until-idle"], ["migrate"]])
def test_a_malformed_database_url_never_reaches_a_real_process_output(
    command: list[str], source: str, tmp_path: Path
) -> None:
    options, overrides = arguments(source, MALFORMED["unencoded-percent"], tmp_path)

    assert_process_refuses_in_one_line(options, overrides, command)


def assert_process_refuses_in_one_line(
    options: list[str], overrides: dict[str, str | None], command: list[str]
) -> None:
    """effectusd as a process of its own exits 3 with one line on stderr, without the secret."""
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


# Several stores ([database.stores]): a store's URL given malformed, as LABEL=URL (the option
# or the environment variable) or as a store's url in the config file, is the same one line.
# LABEL=URL takes a URL with its scheme (a keyword/value string is a bare URL there).
STORE_URLS = {
    "east": "postgresql://postgres@127.0.0.1:5432/effectusd_east",
    "west": "postgresql://postgres@127.0.0.1:5432/effectusd_west",
}
URL_FORM = [shape for shape, url in MALFORMED.items() if url.startswith("postgresql://")]
STORE_SOURCES = [
    *((source, shape) for source in ["label-option", "label-environment"] for shape in URL_FORM),
    *(("store-in-config-file", shape) for shape in MALFORMED),
]


def config_with_stores(tmp_path: Path, west_url: str) -> Path:
    """The example config with [database.stores] east and west instead of [database] url,
    and a fencing authority for them."""
    path = tmp_path / "effectusd.toml"
    example = EXAMPLE_CONFIG.read_text()
    assert example.count('\nurl = "sqlite:///effectusd.db"') == 1
    tables = "".join(
        f'\n[database.stores.{label}]\nurl = {json.dumps(url)}\nnamespace = "tenant-{label}"\n'
        for label, url in {**STORE_URLS, "west": west_url}.items()
    )
    # the example fences its charges: several stores fence through one authority
    authority = '\n[fencing]\nurl = "postgresql://postgres@127.0.0.1:5432/effectusd_authority"\n'
    path.write_text(example.replace('\nurl = "sqlite:///effectusd.db"', "\n") + tables + authority)
    return path


def store_arguments(
    source: str, url: str, tmp_path: Path
) -> tuple[list[str], dict[str, str | None]]:
    """The global options and the environment that give store west ``url`` by ``source``."""
    in_file = source == "store-in-config-file"
    options = [
        "--config",
        str(config_with_stores(tmp_path, url if in_file else STORE_URLS["west"])),
    ]
    env: dict[str, str | None] = {"EFFECTUSD_CONFIG": None, "EFFECTUSD_DATABASE_URL": None}
    if source == "label-option":
        options += ["--database-url", f"west={url}"]
    elif source == "label-environment":
        env["EFFECTUSD_DATABASE_URL"] = f"west={url}"
    return options, env


@pytest.mark.parametrize(("source", "shape"), STORE_SOURCES)
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_malformed_store_url_exits_3_in_one_line_never_quoting_it(
    command: str, source: str, shape: str, tmp_path: Path
) -> None:
    options, env = store_arguments(source, MALFORMED[shape], tmp_path)

    line = refusal_line(options, env, COMMANDS[command])

    assert "PostgreSQL database URL: " in line
    assert "west" in line  # the store is named by its label


@pytest.mark.parametrize("source", ["label-environment", "store-in-config-file"])
def test_a_malformed_store_url_never_reaches_a_real_migrate_output(
    source: str, tmp_path: Path
) -> None:
    options, overrides = store_arguments(source, MALFORMED["unencoded-percent"], tmp_path)

    assert_process_refuses_in_one_line(options, overrides, ["migrate"])

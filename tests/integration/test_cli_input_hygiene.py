"""Input the command line refuses with one line and exit 3, on both stores and before anything
is written: U+0000 in facts or in a plan's arguments (PostgreSQL cannot store it, SQLite
would), and a plan or config file that is not UTF-8."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from effectusd.client import Client
from effectusd.config import load_config
from tests.integration.test_cli_plans_and_sagas import (
    EXAMPLE_CONFIG,
    EXAMPLE_PLAN,
    FACTS,
    run,
)


def _sagas(url: str) -> int:
    return len(Client(load_config(EXAMPLE_CONFIG), database_url=url).list())


def test_submit_with_a_nul_in_a_fact_exits_3_naming_the_fact_and_writes_nothing(
    store_url: str,
) -> None:
    facts = json.dumps({**FACTS, "order": "o-\u0000-1"})

    result = run(
        "submit", str(EXAMPLE_PLAN), "--execution-id", "o-1", "--facts", facts,
        database_url=store_url,
    )  # fmt: skip

    assert result.exit_code == 3, result.output
    assert "facts.order: string contains U+0000" in result.stderr
    assert "o-" not in result.stderr.replace(str(EXAMPLE_PLAN), "")
    assert "Traceback" not in result.output and "UntranslatableCharacter" not in result.output
    assert _sagas(store_url) == 0


def test_submit_of_a_plan_with_a_nul_in_an_argument_exits_3_naming_its_path(
    store_url: str, tmp_path: Path
) -> None:
    plan = json.loads(EXAMPLE_PLAN.read_text())
    plan["steps"][0]["args"]["note"] = {"$literal": {"k\u0000": "x"}}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))  # "\u0000" as JSON writes it: valid JSON

    result = run(
        "submit", str(path), "--execution-id", "o-1", "--facts", json.dumps(FACTS),
        database_url=store_url,
    )  # fmt: skip

    assert result.exit_code == 3, result.output
    assert "steps[0].args.note" in result.stderr and "U+0000" in result.stderr
    assert "Traceback" not in result.output
    assert _sagas(store_url) == 0


@pytest.mark.parametrize(
    ("encoding", "command"),
    [
        ("utf-16", "check"),
        ("utf-16-le", "check"),
        ("latin-1", "submit"),
    ],
)
def test_a_plan_file_that_is_not_utf8_exits_3_in_one_line(
    encoding: str, command: str, tmp_path: Path
) -> None:
    text = EXAMPLE_PLAN.read_text().replace('"checkout"', '"caffè"')
    path = tmp_path / "plan.json"
    path.write_bytes(text.encode(encoding))
    extra = ["--execution-id", "o-1"] if command == "submit" else []

    result = run(command, str(path), *extra, database_url=f"sqlite:///{tmp_path / 'x.db'}")

    assert result.exit_code == 3, result.output
    assert result.stderr.startswith(f"error: {path}: plan is not UTF-8 text")
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output


def test_a_config_file_that_is_not_utf8_exits_3_naming_the_file(tmp_path: Path) -> None:
    config = tmp_path / "effectusd.toml"
    config.write_bytes(EXAMPLE_CONFIG.read_text().encode("utf-16"))

    result = run("check", str(EXAMPLE_PLAN), config=config)

    assert result.exit_code == 3, result.output
    assert result.stderr.startswith(f"error: {config}: is not UTF-8 text")
    assert "Traceback" not in result.output


# --- run: settings it cannot start with --------------------------------------------------------

TOKEN_VARIABLE = "EFFECTUSD_TEST_PAYMENTS_TOKEN"
BEARER_TOML = f"""
[destinations.payments]
base_url = "http://127.0.0.1:9"
bearer_token_env = "{TOKEN_VARIABLE}"

[verbs."payments.charge"]
destination = "payments"
path = "/charges"
"""
TOKEN_SECRET = "s3cr3t-t0ken"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "is not set"),
        (f"{TOKEN_SECRET}\r\nX-Forged: 1", "holds characters not allowed in an HTTP header"),
        (f"{TOKEN_SECRET}\nmore", "holds characters not allowed in an HTTP header"),
        ("  ", "is empty"),
    ],
    ids=["unset", "crlf", "lf", "blank"],
)
def test_run_with_an_unusable_bearer_variable_exits_3_naming_it_never_its_value(
    value: str | None, reason: str, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from effectusd.cli import main
    from tests.conftest import migrated_sqlite

    config = tmp_path / "effectusd.toml"
    config.write_text(BEARER_TOML)
    url = migrated_sqlite(tmp_path)

    result = CliRunner().invoke(
        main,
        ["--config", str(config), "--database-url", url, "run", "--until-idle"],
        env={"EFFECTUSD_CONFIG": None, "EFFECTUSD_DATABASE_URL": None, TOKEN_VARIABLE: value},
    )

    assert result.exit_code == 3, result.output
    assert result.stderr.startswith(
        f"error: destination 'payments': environment variable {TOKEN_VARIABLE} "
        f"(bearer_token_env) {reason}"
    )
    assert len(result.stderr.strip().splitlines()) == 1
    assert TOKEN_SECRET not in result.output and "Traceback" not in result.output


def test_run_on_a_busy_http_port_exits_3_naming_the_port(tmp_path: Path) -> None:
    import socket

    from tests.conftest import migrated_sqlite

    url = migrated_sqlite(tmp_path)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]

        result = run("run", "--until-idle", "--http-port", str(port), database_url=url)

    assert result.exit_code == 3, result.output
    assert result.stderr.startswith(f"error: cannot serve on 127.0.0.1:{port}: ")
    assert "--http-port" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output

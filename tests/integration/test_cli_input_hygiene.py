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

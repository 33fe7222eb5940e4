"""Every command that writes, pointed at a server that takes no writes, stops before writing
with the daemon's own line and exit code (3), never a ReadOnlySqlTransaction traceback; the
commands that only read go on working. The server here refuses writes by
``default_transaction_read_only``, which the daemon's check covers beside a standby in
recovery (the standby itself: tests/failover)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import psycopg
import pytest

from tests.integration.test_cli_plans_and_sagas import (
    EXAMPLE_CONFIG,
    EXAMPLE_PLAN,
    FACTS_JSON,
    VECTOR_SAGA_ID,
    run,
)
from tests.support import backends

pytestmark = pytest.mark.postgres

WRITES = {
    "migrate": ["migrate"],
    "submit": ["submit", str(EXAMPLE_PLAN), "--execution-id", "order-8", "--facts", FACTS_JSON],
    "resolve": ["resolve", VECTOR_SAGA_ID, "reserve", "--committed", "--evidence", "seen"],
    "retry": ["retry", VECTOR_SAGA_ID],
    "cancel": ["cancel", VECTOR_SAGA_ID, "--evidence", "asked"],
    "adopt-contract": ["adopt-contract", VECTOR_SAGA_ID, "--evidence", "seen"],
    "adopt-contract-verb": ["adopt-contract", "--verb", "payments.charge", "--evidence", "seen"],
    "prune": ["prune", "--older-than", "1s"],
}
READS = {
    "sagas-list": ["sagas", "list"],
    "sagas-show": ["sagas", "show", VECTOR_SAGA_ID],
    "migrate-check": ["migrate", "--check"],
    "prune-dry-run": ["prune", "--older-than", "1s", "--dry-run"],
}


@pytest.fixture
def read_only_url(empty_database: str) -> Iterator[str]:
    """A migrated database holding the example saga, then made read-only for every new
    connection (ALTER DATABASE … SET default_transaction_read_only = on)."""
    with psycopg.connect(empty_database, autocommit=True) as conn:
        backends.migrate(conn)
    submitted = run(
        "submit", str(EXAMPLE_PLAN), "--execution-id", "order-7", "--facts", FACTS_JSON,
        database_url=empty_database,
    )  # fmt: skip
    assert submitted.exit_code == 0, submitted.output
    name = empty_database.rsplit("/", 1)[1]
    with psycopg.connect(empty_database, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
    yield empty_database


def daemon_refusal(url: str) -> list[str]:
    """`effectusd run` on ``url`` as a process of its own: its stderr's lines (exit 3)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EFFECTUSD_")}
    env["EFFECTUSD_DATABASE_URL"] = url
    done = subprocess.run(
        [sys.executable, "-m", "effectusd.cli", "--config", str(EXAMPLE_CONFIG), "run",
         "--until-idle", "--log-level", "WARNING"],
        env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    return done.stderr.strip().splitlines()


def test_every_command_that_writes_refuses_a_read_only_server_as_the_daemon_does(
    read_only_url: str,
) -> None:
    [daemon_line] = daemon_refusal(read_only_url)
    assert daemon_line.startswith("error: database: the server takes no writes")

    for name, command in WRITES.items():
        result = run(*command, database_url=read_only_url)

        assert result.exit_code == 3, (name, result.output)
        assert result.stderr.strip().splitlines() == [daemon_line], name
        assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)


def test_the_commands_that_only_read_work_on_a_read_only_server(read_only_url: str) -> None:
    for name, command in READS.items():
        result = run(*command, database_url=read_only_url)

        assert result.exit_code == 0, (name, result.output)

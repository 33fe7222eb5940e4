"""`python -m effectusd.destination keys show|forget` against a real kit ledger on PostgreSQL
and on SQLite: a forgotten permanent failure is audited and the next request with its key runs
the mutation; a stored success is kept unless forced."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result

from effectusd.core.canonical import sha256_hex
from effectusd.core.states import OutcomeClass
from effectusd.destination import (
    EffectusRequest,
    PermanentFailure,
    Reply,
    connect_sqlite,
    handle_sqlite,
    handle_sync,
    install_sqlite,
    install_sync,
)
from effectusd.destination.cli import main
from tests.conftest import create_database, drop_database
from tests.integration.test_destination_kit import invocation, request_of

ALICE = "user:alice"
FAILED = sha256_hex(b"failed")
DONE = sha256_hex(b"done")


@pytest.fixture
def pg_ledger() -> Iterator[str]:
    url = create_database("effectusd_kit_keys")
    with psycopg.connect(url, autocommit=True) as conn:
        install_sync(conn)
        conn.execute("CREATE TABLE effects (k text NOT NULL)")
    yield url
    drop_database(url)


@pytest.fixture(params=[pytest.param("postgresql", marks=pytest.mark.postgres), "sqlite"])
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A kit ledger (and an ``effects`` table) on either backend; its URL."""
    if request.param == "postgresql":
        url: str = request.getfixturevalue("pg_ledger")
        return url
    url = f"sqlite:///{tmp_path / 'kit.db'}"
    conn = connect_sqlite(url)
    try:
        install_sqlite(conn)
        conn.execute("CREATE TABLE effects (k TEXT NOT NULL)")
    finally:
        conn.close()
    return url


def ask(url: str, key: str, *, refuse: bool) -> Reply:
    """One request with ``key`` (its hex) through the kit: refused, or one row in effects."""
    request = dataclasses.replace(request_of(invocation("k")), idempotency_key=key)
    sqlite = url.startswith("sqlite")

    def act(conn: Any, req: EffectusRequest) -> Any:
        if refuse:
            raise PermanentFailure("refunds are closed")
        conn.execute(f"INSERT INTO effects VALUES ({'?' if sqlite else '%s'})", (key,))
        return {"done": True}

    if sqlite:
        conn = connect_sqlite(url)
        try:
            return handle_sqlite(conn, request, act)
        finally:
            conn.close()
    with psycopg.connect(url) as pg:
        return handle_sync(pg, request, act)


def rows(url: str, query: str) -> list[tuple[Any, ...]]:
    if url.startswith("sqlite"):
        conn = connect_sqlite(url)
        try:
            return conn.execute(query).fetchall()
        finally:
            conn.close()
    with psycopg.connect(url) as pg:
        return pg.execute(query).fetchall()


def kit(*args: str, code: int = 0) -> Result:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == code, (result.output, result.stderr)
    return result


def test_forget_a_stored_permanent_failure_audits_it_and_the_next_request_runs(
    ledger: str,
) -> None:
    assert ask(ledger, FAILED, refuse=True).outcome is OutcomeClass.PERMANENT
    assert ask(ledger, FAILED, refuse=False).replayed  # the failure sticks to the key

    shown = json.loads(kit("keys", "show", FAILED, "--database-url", ledger, "--json").stdout)
    record = shown["record"]
    assert (record["answer"], record["status_code"]) == ("permanent_failure", 422)
    assert json.loads(record["response_body"]) == {"error": "refunds are closed"}
    assert (record["effect_id"], record["direction"]) == ("charge", "forward")
    assert shown["audit"] == []

    forgotten = kit(
        *("keys", "forget", FAILED, "--database-url", ledger),
        *("--evidence", "refunds reopened, INC-7", "--actor", ALICE),
    )
    assert "forgot key" in forgotten.stdout
    assert rows(ledger, "SELECT count(*) FROM effectus_dest_keys") == [(0,)]

    after = ask(ledger, FAILED, refuse=False)
    assert (after.status, after.replayed) == (200, False)  # the mutation really ran
    assert rows(ledger, "SELECT k FROM effects") == [(FAILED,)]

    shown = json.loads(kit("keys", "show", FAILED, "--database-url", ledger, "--json").stdout)
    assert shown["record"]["answer"] == "success"
    [audit] = shown["audit"]
    assert (audit["action"], audit["actor"], audit["evidence"], audit["forced"]) == (
        "forget",
        ALICE,
        "refunds reopened, INC-7",
        False,
    )
    assert (audit["status_code"], audit["outcome"]) == (422, "permanent_failure")


def test_a_stored_success_is_kept_unless_forced(ledger: str) -> None:
    assert ask(ledger, DONE, refuse=False).status == 200
    refused = kit(*("keys", "forget", DONE, "--database-url", ledger, "--evidence", "x"), code=4)
    assert "double effect" in refused.stderr and "--force" in refused.stderr
    assert rows(ledger, "SELECT count(*) FROM effectus_dest_keys") == [(1,)]
    assert rows(ledger, "SELECT count(*) FROM effectus_dest_key_audit") == [(0,)]

    forced = kit(
        *("keys", "forget", DONE, "--database-url", ledger),
        *("--evidence", "charge reversed by hand", "--force", "--json"),
    )
    assert json.loads(forced.stdout)["forced"] is True
    assert rows(ledger, "SELECT forced FROM effectus_dest_key_audit") in ([(True,)], [(1,)])


def test_refusals_exit_with_their_codes_and_change_nothing(ledger: str) -> None:
    ask(ledger, FAILED, refuse=True)
    missing = "0" * 64
    assert (
        "no stored answer" in kit("keys", "show", missing, "--database-url", ledger, code=5).stderr
    )
    kit("keys", "forget", missing, "--database-url", ledger, "--evidence", "x", code=5)
    kit("keys", "forget", FAILED, "--database-url", ledger, "--evidence", "  ", code=3)
    refused = json.loads(
        kit(
            *("keys", "forget", missing, "--database-url", ledger, "--evidence", "x", "--json"),
            code=5,
        ).stdout
    )
    assert refused["ok"] is False and refused["refused"] == "not_found"
    assert rows(ledger, "SELECT count(*) FROM effectus_dest_keys") == [(1,)]


def test_a_missing_sqlite_file_is_not_created(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'nope.db'}"
    assert "--database-url" in kit("keys", "show", FAILED, "--database-url", url, code=5).stderr
    assert not (tmp_path / "nope.db").exists()


@pytest.mark.postgres
def test_forget_refuses_a_key_whose_request_is_in_progress(pg_ledger: str) -> None:
    ask(pg_ledger, FAILED, refuse=True)
    with psycopg.connect(pg_ledger) as holder:  # what the kit holds while a request runs
        holder.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('effectus_dest/key/' || %s, 0))",
            (FAILED,),
        )
        forget = ("keys", "forget", FAILED, "--database-url", pg_ledger, "--evidence", "x")
        assert "in progress" in kit(*forget, code=4).stderr
    assert rows(pg_ledger, "SELECT count(*) FROM effectus_dest_keys") == [(1,)]


def test_the_module_runs_as_a_command(ledger: str) -> None:
    ask(ledger, FAILED, refuse=True)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "effectusd.destination",
            *("keys", "show", FAILED),
            "--database-url",
            ledger,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "permanent_failure (422)" in done.stdout


def test_a_database_it_cannot_reach_is_named_by_the_failures_class_never_the_drivers_text() -> None:
    # libpq's message for a refused connection quotes the host, the port and the user
    url = "postgresql://kit-operator:hunter2-secret@127.0.0.1:1/ledger?connect_timeout=2"
    failed = kit("keys", "show", FAILED, "--database-url", url, code=1)
    assert failed.stderr.startswith("error: database: OperationalError")
    for secret in ("kit-operator", "hunter2-secret", "127.0.0.1", "ledger"):
        assert secret not in failed.output + failed.stderr

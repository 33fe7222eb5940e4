"""What only the SQLite store has to show: the file is shared by processes on one machine
(WAL, one writer at a time, claims that never overlap), and a submit joins a transaction of
Python's own sqlite3 module. Everything both stores must do is in tests/conformance."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from effectusd.backends.sqlite.connection import BUSY_TIMEOUT_MS
from effectusd.backends.sqlite.connection import connect as sqlite_connect
from effectusd.client import Client
from effectusd.store import operations
from tests.conformance.support import conformance_config
from tests.support import backends
from tests.support.harness import serial_plan

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'effectusd.db'}"
    with backends.connection(url, create=True) as conn:
        backends.migrate(conn)
    return url


def test_the_file_is_in_wal_mode_and_every_connection_is_set_up_alike(sqlite_url: str) -> None:
    path = backends.sqlite_path(sqlite_url)
    plain = sqlite3.connect(path)  # WAL is a property of the file, not of our connection
    try:
        assert plain.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        plain.close()
    conn = sqlite_connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("PRAGMA foreign_keys").fetchone() == (1,)
        assert conn.execute("PRAGMA busy_timeout").fetchone() == (BUSY_TIMEOUT_MS,)
        assert conn.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL
        assert conn.isolation_level is None  # the runner opens its own transactions
    finally:
        conn.close()


@pytest.mark.parametrize("ending", ["rollback", "commit"])
def test_a_submit_joins_a_transaction_of_pythons_sqlite3_module(
    sqlite_url: str, ending: str
) -> None:
    client = Client(conformance_config(), database_url=sqlite_url)
    conn = sqlite3.connect(backends.sqlite_path(sqlite_url))  # implicit transactions (legacy)
    try:
        result = client.submit(serial_plan("p", ["pay"]), execution_id="x", conn=conn)
        assert conn.in_transaction  # ours: the submit joined it, it did not commit on its own
        getattr(conn, ending)()
    finally:
        conn.close()
    stored = client.get(result.saga_id)
    assert (stored is not None) == (ending == "commit")


WORKER = """
import asyncio, json, sys
from effectusd.core.engine import Completion
from effectusd.core.states import OutcomeClass
from effectusd.fencing.store import StoreFencing
from effectusd.store.sql import SQLITE_STATEMENTS as STORE_STATEMENTS
from effectusd.backends.sqlite.session import ThreadSession
from effectusd.store.sqlite.dispatch import SqliteDispatchStore
from tests.conformance.support import conformance_config

async def main(path, owner):
    store = SqliteDispatchStore(
        ThreadSession(path, STORE_STATEMENTS),
        conformance_config().registry(),
        owner,
        30.0,
        StoreFencing(),
    )
    print("ready", flush=True)
    sys.stdin.readline()  # the test starts both workers at once
    claimed = []
    while claims := await store.claim({"dest": 2}):
        if not claimed:  # hold the first lease until the other process holds one too
            print("claimed", flush=True)
            sys.stdin.readline()
        claimed += [[c.dispatch_id, c.attempt, c.lease_token] for c in claims]
        ready, _ = await store.write_ahead(claims)
        await store.record([
            Completion.answered(w.claim, OutcomeClass.SUCCESS)
            for w in ready
        ])
    await store.close()
    print(json.dumps(claimed), flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def test_two_processes_claiming_from_one_file_never_lease_a_row_twice(sqlite_url: str) -> None:
    sagas = 120
    client = Client(conformance_config(), database_url=sqlite_url)
    for i in range(sagas):
        client.submit(serial_plan("p", ["pay"]), execution_id=f"x-{i}")
    path = backends.sqlite_path(sqlite_url)
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, path, f"process-{n}"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in (1, 2)
    ]
    try:
        for worker in workers:  # both have opened the store ...
            assert worker.stdout is not None and worker.stdin is not None
            assert worker.stdout.readline().strip() == "ready", worker.stderr
        for worker in workers:  # ... before either claims
            assert worker.stdin is not None
            worker.stdin.write("go\n")
            worker.stdin.flush()
        for worker in workers:  # each holds a lease the other could not take ...
            assert worker.stdout is not None
            assert worker.stdout.readline().strip() == "claimed", worker.stderr
        for worker in workers:  # ... and then both carry on, racing for the rest
            assert worker.stdin is not None
            worker.stdin.write("on\n")
            worker.stdin.flush()
        results = []
        for worker in workers:
            out, err = worker.communicate(timeout=120)
            assert worker.returncode == 0, err
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()

    leased = [tuple(claim) for result in results for claim in result]
    ids = [dispatch_id for dispatch_id, _, _ in leased]
    assert len(ids) == len(set(ids)) == sagas  # every row leased exactly once
    assert {attempt for _, attempt, _ in leased} == {1}
    assert all(results), "both processes should have claimed some rows"
    with backends.connection(sqlite_url) as conn:
        rows = backends.run(conn, operations.list_sagas(limit=1000))
        assert len(rows) == sagas and {row["state"] for row in rows} == {"completed"}
        attempts = conn.execute(
            "SELECT count(*), count(DISTINCT dispatch_id), max(attempt) FROM effectus_saga_attempts"
        ).fetchone()
    assert attempts == (sagas, sagas, 1)

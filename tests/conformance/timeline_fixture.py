"""A database written by one release, and the timelines that release read from it: the
fixture ``test_timeline_fixture.py`` loads into a fresh migrated store, so that a later
reader must give the same timelines from the same rows.

``python -m tests.conformance.timeline_fixture`` writes ``tests/fixtures/timelines/`` anew
(one data dump and one JSON of timelines per store); run it only to replace the fixture with
what the current code writes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import psycopg

from effectusd.core.states import OutcomeClass
from effectusd.operator import Resolution, resolve
from effectusd.operator.probes import Settled
from tests.conformance.support import StoreUnderTest, claim_one, completion, step
from tests.conformance.test_parallel import fan_plan
from tests.conformance.test_probes import blocked, committed
from tests.support import backends
from tests.support.harness import serial_plan

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "timelines"
# parents before children: the order rows are inserted in
TABLES = (
    "effectus_saga_instances",
    "effectus_saga_steps",
    "effectus_saga_outbox",
    "effectus_saga_attempts",
    "effectus_saga_events",
    "effectus_dispatch_probes",
    "effectus_fencing_counters",
    "effectus_fencing_leases",
    "effectus_saga_tombstones",
)


async def write_sagas(store: StoreUnderTest) -> list[str]:
    """Sagas of every shape the timeline reader places: a sequential success, a fan-out and
    its join, a compensation, a block resolved by an operator, and one a probe settles."""
    daemon = await store.dispatch_store(owner="daemon-a")
    sagas = [store.submit(serial_plan("p", ["pay", "pay", "pay"]), "sequential")]
    for _ in range(3):
        await step(daemon, OutcomeClass.SUCCESS, result={"ok": 1})
    sagas.append(store.submit(fan_plan(), "fan-out"))
    for _ in range(5):
        await step(daemon, OutcomeClass.SUCCESS)
    sagas.append(store.submit(serial_plan("p", ["pay", "pay"], {"s1": "undo"}), "undone"))
    await step(daemon, OutcomeClass.SUCCESS)
    await step(daemon, OutcomeClass.PERMANENT)
    await step(daemon, OutcomeClass.SUCCESS)
    sagas.append(store.submit(serial_plan("p", ["pay", "pay"]), "resolved"))
    await step(daemon, OutcomeClass.UNKNOWN)  # at_most_once: blocked_unknown
    store.run(
        resolve(
            sagas[-1],
            "s1",
            Resolution.COMMITTED,
            registry=store.registry,
            actor="user:ops",
            evidence="found in the ledger",
            result={"ok": 2},
        )
    )
    await step(daemon, OutcomeClass.SUCCESS)
    sagas.append(await _probed(store))
    return sagas


async def _probed(store: StoreUnderTest) -> str:
    async with blocked(store, committed) as (saga, daemon, _, prober):
        assert await prober.once() == [Settled.COMMITTED]
        claim = await claim_one(daemon)
        report = await daemon.record([completion(claim, OutcomeClass.SUCCESS)])
        assert report.applied == 1
    return saga


def timelines(store: StoreUnderTest, sagas: list[str]) -> dict[str, list[dict[str, Any]]]:
    return {saga: store.view(saga)["timeline"] for saga in sagas}


def dump(store: StoreUnderTest) -> str:
    """The rows of every effectus table as SQL inserts (no schema, no migration versions)."""
    if not store.sqlite:
        tables = [arg for table in TABLES for arg in ("--table", table)]
        dumped = subprocess.run(
            ["pg_dump", "--data-only", "--inserts", "--no-owner", *tables, store.url],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        # statements only: no comments, no psql meta-commands (\restrict)
        return "\n".join(line for line in dumped.splitlines() if line and line[0] not in "-\\")
    with store.connect() as conn:
        dumped = list(conn.iterdump())
    order = {f'INSERT INTO "{table}"': n for n, table in enumerate(TABLES)}
    lines = [line for line in dumped if line.split(" VALUES", 1)[0] in order]
    return "\n".join(sorted(lines, key=lambda line: order[line.split(" VALUES", 1)[0]]))


def load(store: StoreUnderTest, text: str) -> None:
    """The rows of ``dump`` into ``store`` (fresh, migrated, empty)."""
    with store.connect() as conn:
        if store.sqlite:
            conn.executescript(text)  # type: ignore[attr-defined]
        else:
            conn.execute(text.encode())  # type: ignore[call-overload]


def fixture(kind: str) -> tuple[str, dict[str, list[dict[str, Any]]]]:
    sql = (FIXTURES / f"{kind}.sql").read_text()
    return sql, json.loads((FIXTURES / f"{kind}.json").read_text())


async def _write(kind: str, url: str) -> None:
    store = StoreUnderTest(kind, url)
    try:
        sagas = await write_sagas(store)
    finally:
        await store.close()
    FIXTURES.mkdir(parents=True, exist_ok=True)
    (FIXTURES / f"{kind}.sql").write_text(dump(store) + "\n")
    (FIXTURES / f"{kind}.json").write_text(json.dumps(timelines(store, sagas), indent=1) + "\n")


def main() -> None:
    from tests.conftest import create_database, drop_database

    url = create_database()
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            backends.migrate(conn)
        asyncio.run(_write("postgres", url))
    finally:
        drop_database(url)
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{folder}/effectusd.db"
        with backends.connection(url, create=True) as conn:
            backends.migrate(conn)
        asyncio.run(_write("sqlite", url))
    sys.stdout.write(f"written: {FIXTURES}\n")


if __name__ == "__main__":
    main()

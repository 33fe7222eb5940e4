"""The two ways out of blocked_compensation when the destination runs on the kit, end to end:
a real daemon (PostgreSQL store) calls a kit service (uvicorn in this loop, on PostgreSQL or
SQLite) whose refund fails permanently; the kit stores that answer under the key, so a plain
`effectusd retry` only gets it replayed. Then either

(a) `effectusd resolve SAGA s2 --direction compensation --committed` (refunded by hand): the
    saga compensates the earlier steps and ends compensated; or
(b) `python -m effectusd.destination keys forget KEY` and `effectusd retry SAGA`: the kit runs
    the refund for real and the saga ends compensated.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
import pytest_asyncio
from click.testing import CliRunner

from effectusd.core.identity import idempotency_key
from effectusd.core.states import Direction
from effectusd.destination import EffectusRequest, PermanentFailure
from effectusd.destination.asgi import effectus_app
from effectusd.destination.cli import main as kit_main
from tests.conftest import create_database, drop_database
from tests.integration.test_destination_kit import serving
from tests.integration.test_operator import cli_json, config_file, events, saga_row
from tests.support.harness import client_for, make_config, run_until_idle, serial_plan

pytestmark = pytest.mark.postgres  # the daemon's store

ALICE = "user:alice"
PLAN = serial_plan("refunds", ["do", "do", "fail"], {"s1": "undo", "s2": "undo"})


@dataclass
class Shop:
    """A kit service: /do records, /fail declines, /undo refunds unless its step is closed."""

    url: str  # the service's database
    base_url: str = ""
    closed: set[int] = field(default_factory=set)

    def act(self, verb: str, request: EffectusRequest) -> tuple[str, int]:
        n = int(request.arguments["n"])
        if verb == "fail":
            raise PermanentFailure("out of stock")
        if verb == "undo" and n in self.closed:
            raise PermanentFailure("refunds are closed")
        return verb, n

    def done(self) -> list[tuple[str, int]]:
        query = "SELECT verb, n FROM shop_done ORDER BY id"
        if self.url.startswith("sqlite"):
            with sqlite3.connect(self.url.removeprefix("sqlite:///")) as conn:
                return [tuple(row) for row in conn.execute(query).fetchall()]  # type: ignore[misc]
        with psycopg.connect(self.url) as conn:
            return [tuple(row) for row in conn.execute(query).fetchall()]  # type: ignore[misc]


def postgres_routes(shop: Shop) -> dict[str, Any]:
    def route(verb: str) -> Any:
        async def mutation(conn: psycopg.AsyncConnection[Any], request: EffectusRequest) -> Any:
            done = shop.act(verb, request)
            await conn.execute("INSERT INTO shop_done (verb, n) VALUES (%s, %s)", done)
            return {"verb": verb}

        return mutation

    return {f"/{verb}": route(verb) for verb in ("do", "fail", "undo")}


def sqlite_routes(shop: Shop) -> dict[str, Any]:
    def route(verb: str) -> Any:
        def mutation(conn: sqlite3.Connection, request: EffectusRequest) -> Any:
            done = shop.act(verb, request)
            conn.execute("INSERT INTO shop_done (verb, n) VALUES (?, ?)", done)
            return {"verb": verb}

        return mutation

    return {f"/{verb}": route(verb) for verb in ("do", "fail", "undo")}


@pytest_asyncio.fixture(params=[pytest.param("postgresql"), pytest.param("sqlite")])
async def shop(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Shop]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'shop.db'}"
    else:
        url = create_database("effectusd_kit_shop")
    shop = Shop(url)
    try:
        if request.param == "sqlite":

            def setup(conn: Any) -> None:
                conn.execute(
                    "CREATE TABLE shop_done (id INTEGER PRIMARY KEY, verb TEXT, n INTEGER)"
                )

            app = effectus_app(url, sqlite_routes(shop), setup=setup)
        else:

            async def pg_setup(conn: psycopg.AsyncConnection[Any]) -> None:
                await conn.execute(
                    "CREATE TABLE shop_done (id serial PRIMARY KEY, verb text, n int)"
                )

            app = effectus_app(url, postgres_routes(shop), setup=pg_setup)
        async with serving(app) as base_url:
            shop.base_url = base_url
            yield shop
    finally:
        if request.param != "sqlite":
            drop_database(url)


async def blocked_compensation(shop: Shop, db: str, tmp_path: Path) -> tuple[Any, Path, str]:
    config = make_config(shop.base_url, {"do": {}, "fail": {}, "undo": {}})
    shop.closed.add(2)
    saga = client_for(config, db).submit(PLAN, execution_id="order-1").saga_id
    await run_until_idle(config, db)
    row = saga_row(db, saga)
    assert row["state"] == "blocked_compensation", row
    assert shop.done() == [("do", 1), ("do", 2)]
    return config, config_file(tmp_path, config), saga


async def test_resolve_a_compensation_undone_by_hand_then_the_saga_compensates(
    shop: Shop, db: str, tmp_path: Path
) -> None:
    config, live, saga = await blocked_compensation(shop, db, tmp_path)
    report = cli_json(
        live,
        db,
        *("resolve", saga, "s2", "--direction", "compensation", "--committed"),
        *("--evidence", "refunded s2 by hand, INC-9", "--actor", ALICE),
    )
    assert report["saga_state"] == {"from": "blocked_compensation", "to": "compensating"}
    assert report["dispatch_state"] == {"from": "failed_permanent", "to": "succeeded"}

    await run_until_idle(config, db)
    row = saga_row(db, saga)
    assert row["state"] == "compensated" and row["stop_reason"].startswith("step 's3' failed")
    assert shop.done() == [("do", 1), ("do", 2), ("undo", 1)]  # s2 was refunded by hand
    [resolved] = events(db, saga, "operator_resolve")
    assert (resolved["actor"], resolved["evidence"]) == (ALICE, "refunded s2 by hand, INC-9")
    assert resolved["direction"] == "compensation"


async def test_forget_the_stored_failure_then_retry_really_refunds(
    shop: Shop, db: str, tmp_path: Path
) -> None:
    config, live, saga = await blocked_compensation(shop, db, tmp_path)
    shop.closed.clear()  # the cause is fixed

    # A retry alone sends the same key: the kit replays the stored failure.
    cli_json(live, db, "retry", saga, "--actor", ALICE)
    await run_until_idle(config, db)
    assert saga_row(db, saga)["state"] == "blocked_compensation"
    assert shop.done() == [("do", 1), ("do", 2)]

    key = idempotency_key("default", saga, "s2", Direction.COMPENSATION)
    forgot = CliRunner().invoke(
        kit_main,
        [
            "keys",
            "forget",
            key,
            "--database-url",
            shop.url,
            "--evidence",
            "refunds reopened, INC-9",
            "--actor",
            ALICE,
        ],
    )
    assert forgot.exit_code == 0, forgot.output
    cli_json(live, db, "retry", saga, "--evidence", "kit key forgotten", "--actor", ALICE)
    await run_until_idle(config, db)

    row = saga_row(db, saga)
    assert row["state"] == "compensated" and row["stop_reason"].startswith("step 's3' failed")
    assert shop.done() == [("do", 1), ("do", 2), ("undo", 2), ("undo", 1)]
    assert [e["actor"] for e in events(db, saga, "operator_retry")] == [ALICE, ALICE]

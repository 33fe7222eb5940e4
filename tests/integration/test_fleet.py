"""One daemon serving several stores, on real PostgreSQL databases and a real HTTP destination:
each store's part claims its namespace's rows alone; the process's slots are dealt in turns,
so a quiet store's new saga is not queued behind another store's backlog; a store that is
down or read-only stalls its own sagas alone, and every report names it by its label."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
import pytest

from effectusd.client import Submission
from effectusd.config import Config
from effectusd.core.stores import Store
from effectusd.dispatcher.daemon import Daemon
from effectusd.dispatcher.fleet import Fleet
from tests.conftest import drop_database
from tests.integration.test_cli_stores import (
    DOWN,
    NAMESPACES,
    SECRET,
    client,
    state,
    stores_file,
    submit,
    two_stores,
)
from tests.integration.test_fencing_authority import relayed
from tests.support.destination import HeldUntilMoreThan, Request, Response, ok, running
from tests.support.harness import fetch, make_config, serial_plan

pytestmark = pytest.mark.postgres
__all__ = ["two_stores"]  # the fixture, used by name


def stores_of(urls: dict[str, str]) -> list[Store]:
    return [Store(label, url, NAMESPACES[label]) for label, url in urls.items()]


async def until(condition: Any, what: str, within_s: float = 30.0) -> None:
    """Poll ``condition`` (off the event loop) until it holds; fail naming ``what``."""
    deadline = time.monotonic() + within_s
    while not await asyncio.to_thread(condition):
        assert time.monotonic() < deadline, f"not within {within_s}s: {what}"
        await asyncio.sleep(0.02)


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_run_serves_every_store_from_each_process_and_claims_only_its_namespace(
    two_stores: dict[str, str], tmp_path: Path
) -> None:
    with running() as dest:
        config = make_config(dest.base_url, {"do": {}})
        east = submit(config, two_stores["east"], "east", "order-7")
        west = submit(config, two_stores["west"], "west", "order-7")
        # a saga of west's namespace written into east's database: no part claims it there
        stray = submit(config, two_stores["east"], "west", "order-9")
        live = stores_file(tmp_path, config, two_stores)
        env = {k: v for k, v in os.environ.items() if not k.startswith("EFFECTUSD_")}
        command = [sys.executable, "-m", "effectusd.cli", "--config", str(live), "run"]

        done = subprocess.run(
            [*command, "--until-idle", "--processes", "2"],
            env=env,
            capture_output=True,
            timeout=120,
        )

        log = done.stderr.decode()
        assert done.returncode == 0, log
        assert SECRET not in log and "serving 2 stores (east, west)" in log
        assert state(two_stores["east"], east) == "completed"
        assert state(two_stores["west"], west) == "completed"
        assert state(two_stores["east"], stray) == "running"
        keys = sorted(request.key for request in dest.requests)
        sent = [
            fetch(
                two_stores[label],
                "SELECT idempotency_key FROM effectus_saga_outbox WHERE saga_id = %s",
                saga,
            )[0]["idempotency_key"]
            for label, saga in (("east", east), ("west", west))
        ]
        assert keys == sorted(sent)  # each order-7 once, under its own namespace's key


def slow(request: Request) -> Response:
    time.sleep(0.05)
    return ok(request)


async def test_a_quiet_stores_new_saga_is_claimed_within_a_second_behind_a_backlog(
    two_stores: dict[str, str],
) -> None:
    with running(slow) as dest:
        # a long poll: west's claim comes from its notification and its turn, not a timer
        settings = {"concurrency": 4, "poll_interval": "5s"}
        config = make_config(dest.base_url, {"do": {}}, dispatcher=settings)
        plan = serial_plan("p", ["do"])
        busy = client(config, two_stores["east"], "east")
        busy.submit_many(Submission(plan, f"bulk-{i}") for i in range(3000))
        fleet = Fleet(config, stores_of(two_stores))
        task = asyncio.create_task(fleet.run())
        try:
            await until(lambda: len(dest.requests) >= 40, "east's backlog being worked")
            quiet = submit(config, two_stores["west"], "west", "new-1")
            claimed = (
                "SELECT extract(epoch FROM a.claimed_at - o.created_at) AS seconds"
                " FROM effectus_saga_outbox o JOIN effectus_saga_attempts a USING (dispatch_id)"
                " WHERE o.saga_id = %s"
            )
            await until(lambda: fetch(two_stores["west"], claimed, quiet), "west's claim")
        finally:
            fleet.stopping.set()
            await asyncio.wait_for(task, 30)
    [row] = fetch(two_stores["west"], claimed, quiet)
    assert float(row["seconds"]) < 1.0, row
    [left] = fetch(
        two_stores["east"], "SELECT count(*) AS n FROM effectus_saga_outbox WHERE state = 'queued'"
    )
    assert left["n"] > 1000  # claimed while east's backlog was still there


def read_only(url: str, on: bool) -> None:
    name = url.rsplit("/", 1)[1]
    setting = "on" if on else "off"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET default_transaction_read_only = off")
        conn.execute(f"ALTER DATABASE {name} SET default_transaction_read_only = {setting}")


async def test_a_store_down_or_read_only_stalls_its_own_sagas_alone(
    two_stores: dict[str, str],
) -> None:
    urls = {**two_stores, "down": DOWN}
    with running() as dest:
        config: Config = make_config(dest.base_url, {"do": {}}, observability={"http_port": 0})
        east = submit(config, two_stores["east"], "east", "order-1")
        west = submit(config, two_stores["west"], "west", "order-1")
        read_only(two_stores["west"], True)
        fleet = Fleet(config, stores_of(urls))
        task = asyncio.create_task(fleet.run())
        try:
            await until(lambda: state(two_stores["east"], east) == "completed", "east's saga")
            assert fleet.http_port is not None
            port = fleet.http_port
            health = await asyncio.to_thread(get, port, "/healthz")
            ready = await asyncio.to_thread(get, port, "/readyz")
            metrics = (await asyncio.to_thread(get, port, "/metrics"))[1]
        finally:
            fleet.stopping.set()
            await asyncio.wait_for(task, 30)
            read_only(two_stores["west"], False)
    assert state(two_stores["west"], west) == "running"
    assert len(dest.requests) == 1
    assert health[0] == 200, health
    assert ready[0] == 503, ready
    stores = json.loads(ready[1])["stores"]
    assert stores["east"]["ok"] is True and stores["east"]["namespace"] == "tenant-east"
    assert stores["down"]["ok"] is False
    assert stores["down"]["trouble"].startswith("OperationalError"), stores["down"]
    assert "the server takes no writes" in stores["west"]["trouble"]  # refused at start
    assert json.loads(health[1])["stores"]["down"]["database"] == "not connected"
    assert 'effectusd_store_serving{store="down"} 0.0' in metrics
    assert 'effectusd_store_serving{store="east"} 1.0' in metrics
    assert 'effectusd_outcomes_total{destination="dest",direction="forward",' in metrics
    assert 'store="east"' in metrics
    for text in (health[1], ready[1], metrics):
        assert SECRET not in text and "127.0.0.1:1/" not in text
        assert not any(url in text for url in two_stores.values())


async def test_until_idle_serves_the_stores_it_can_and_fails_naming_the_one_it_cannot(
    two_stores: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    with running() as dest:
        config = make_config(dest.base_url, {"do": {}})
        east = submit(config, two_stores["east"], "east", "order-1")
        fleet = Fleet(config, stores_of({"east": two_stores["east"], "down": DOWN}))

        code = await asyncio.wait_for(fleet.run(until_idle=True), 60)

    assert code == 1
    assert state(two_stores["east"], east) == "completed"
    assert "store 'down' cannot be served (OperationalError" in caplog.text
    assert SECRET not in caplog.text


def test_run_with_several_stores_and_the_console_exits_3_naming_the_way(
    two_stores: dict[str, str], tmp_path: Path
) -> None:
    live = stores_file(tmp_path, make_config("http://127.0.0.1:9", {"do": {}}), two_stores)
    env = {k: v for k, v in os.environ.items() if not k.startswith("EFFECTUSD_")}
    command = [sys.executable, "-m", "effectusd.cli", "--config", str(live), "run"]

    done = subprocess.run(
        [*command, "--console", "--http-port", "0", "--until-idle"],
        env=env,
        capture_output=True,
        timeout=60,
    )

    assert done.returncode == 3, done.stderr.decode()
    assert "with `effectusd console`" in done.stderr.decode()


async def test_a_store_lost_while_served_stalls_its_own_sagas_alone(
    two_stores: dict[str, str],
) -> None:
    with running() as dest:
        config = make_config(dest.base_url, {"do": {}}, observability={"http_port": 0})
        first = {label: submit(config, url, label, "order-1") for label, url in two_stores.items()}
        fleet = Fleet(config, stores_of(two_stores))
        task = asyncio.create_task(fleet.run())
        try:
            for label, saga in first.items():
                url = two_stores[label]
                await until(lambda u=url, s=saga: state(u, s) == "completed", f"{label}'s saga")
            await asyncio.to_thread(drop_database, two_stores["west"])  # its connections too
            later = submit(config, two_stores["east"], "east", "order-2")
            await until(lambda: state(two_stores["east"], later) == "completed", "east's next")
            assert fleet.http_port is not None
            health = await asyncio.to_thread(get, fleet.http_port, "/healthz")
        finally:
            fleet.stopping.set()
            await asyncio.wait_for(task, 30)
    assert health[0] == 200, health
    stores = json.loads(health[1])["stores"]
    assert stores["east"]["ok"] is True
    assert stores["west"]["ok"] is False  # its ping fails: named, by its label
    assert SECRET not in health[1] and two_stores["west"] not in health[1]


async def test_a_store_whose_claims_hang_holds_back_no_share_of_the_others_slots(
    two_stores: dict[str, str],
) -> None:
    """West's server is cut while served: each of its claims waits out its pool (30 s), and a
    claim holds the slots it asks for while it runs. After one failed claim west asks for a
    single row until a claim works again, so east's sagas get the other three of four slots
    at once (each call is held until the third arrives), not west's half for 30 s."""
    async with relayed(two_stores["west"]) as (proxy, west_url):
        with running() as dest:
            config = make_config(dest.base_url, {"do": {}}, dispatcher={"concurrency": 4})
            urls = {"east": two_stores["east"], "west": west_url}
            # through the relay, which runs on this loop: off it
            warm = await asyncio.to_thread(submit, config, west_url, "west", "warm")
            fleet = Fleet(config, stores_of(urls))
            task = asyncio.create_task(fleet.run())
            try:
                await until(lambda: state(west_url, warm) == "completed", "west served")
                west = next(part.daemon for part in fleet.parts if part.label == "west")
                await proxy.stop()  # its pool's connections cut, and no new one opens
                await until(lambda: failing(west), "west's claims failing")
                await until(lambda: west.capacity.busy > 0, "west's claim waiting on its pool")
                dest.handler = held = HeldUntilMoreThan(2)
                east = [submit(config, urls["east"], "east", f"order-{n}") for n in range(3)]
                await until(
                    lambda: [state(urls["east"], saga) for saga in east] == ["completed"] * 3,
                    "east's three sagas, called at once",
                    within_s=15,
                )
                assert west.capacity.busy == 1  # the one row it asks for
            finally:
                fleet.stopping.set()
                await asyncio.wait_for(task, 60)
    assert held.exceeded.is_set()
    assert [request.attempt for request in dest.requests] == [1, 1, 1, 1]


def failing(daemon: Daemon) -> bool:
    return daemon.claimer is not None and daemon.claimer.failing_since is not None

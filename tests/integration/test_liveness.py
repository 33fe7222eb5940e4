"""Liveness under poison: one more destination, one bad row or one stuck loop never stops
the daemon for everyone else (real daemon, real PostgreSQL or SQLite, real HTTP)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import psycopg
import pytest

from effectusd.dispatcher.daemon import Daemon
from tests.support import backends
from tests.support.destination import Response, running
from tests.support.harness import (
    attempts_of,
    client_for,
    fetch,
    make_config,
    run_until_idle,
    serial_plan,
)


def destinations_config(base_url: str, count: int, **sections: Any) -> Any:
    names = [f"d{i:02}" for i in range(count)]
    return make_config(
        base_url,
        {f"v-{name}": {"destination": name} for name in names},
        destinations={name: {"base_url": base_url} for name in names},
        **sections,
    )


@pytest.mark.parametrize("count", [6, 20])
async def test_every_destination_with_work_is_called_with_default_limits(
    store_url: str, count: int
) -> None:
    """Defaults: 64 slots overall, 16 per destination, so C is below the sum of limits."""
    with running() as dest:
        config = destinations_config(dest.base_url, count)
        assert config.dispatcher.concurrency < sum(
            d.max_concurrency for d in config.destinations.values()
        )
        client = client_for(config, store_url)
        sagas = [
            client.submit(serial_plan(f"p-{verb}", [verb, verb]), execution_id=verb).saga_id
            for verb in config.verbs
        ]
        await run_until_idle(config, store_url)

        assert [client.get(saga).state for saga in sagas] == ["completed"] * count
        called = {r.path for r in dest.requests}
        assert called == {f"/{verb}" for verb in config.verbs}


def unresolvable_plan() -> dict[str, Any]:
    """s1 (undone by undo) succeeds; s2's argument points into s1's result where nothing is."""
    return {
        "plan_id": "unresolvable",
        "steps": [
            {
                "id": "s1",
                "verb": "work",
                "args": {"n": 1},
                "compensate": {"verb": "undo", "args": {}},
            },
            {
                "id": "s2",
                "verb": "work",
                "args": {"n": 2, "ref": {"$result": "s1", "path": "/missing"}},
                "compensate": "none",
            },
        ],
    }


async def test_an_unresolvable_next_step_fails_alone_and_the_rest_is_recorded(
    store_url: str,
) -> None:
    with running() as dest:
        config = make_config(dest.base_url, {"work": {}, "undo": {}})
        client = client_for(config, store_url)
        poisoned = client.submit(unresolvable_plan(), execution_id="bad").saga_id
        healthy = [
            client.submit(serial_plan("fine", ["work"] * 2), execution_id=f"ok-{i}").saga_id
            for i in range(6)
        ]
        await run_until_idle(config, store_url)

        assert [client.get(saga).state for saga in healthy] == ["completed"] * 6
        view = client.get(poisoned)
        assert view.state == "compensated"
        assert "'s2' could not be dispatched" in view.stop_reason
        states = {s.effect_id: s.state for s in view.steps}
        assert states == {"s1": "compensated", "s2": "failed"}
        [s2] = [s for s in view.steps if s.effect_id == "s2"]
        assert s2.dispatches == []  # nothing was sent for it
        sent = [r for r in dest.requests if r.headers["x-effectus-saga-id"] == poisoned]
        assert [(r.effect, r.direction) for r in sent] == [
            ("s1", "forward"),
            ("s1", "compensation"),
        ]


def deeply_nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


async def test_a_saga_row_no_loader_can_decode_stops_that_saga_only(store_url: str) -> None:
    """Facts nested past what any of our JSON loaders reads (Python's recursion limit, orjson's
    1,024 levels; written behind submit's back, as an older version or a manual edit could):
    recording that saga's outcome cannot even read its row. The daemon keeps running, the saga
    blocks with the failure as evidence."""
    with running() as dest:
        config = make_config(dest.base_url, {"work": {}})
        client = client_for(config, store_url)
        plan = serial_plan("fine", ["work"] * 2)
        poisoned = client.submit(plan, execution_id="deep").saga_id
        healthy = [client.submit(plan, execution_id=f"ok-{i}").saga_id for i in range(5)]
        cast = "" if "sqlite" in store_url else "::jsonb"
        mark = "?" if "sqlite" in store_url else "%s"
        with backends.connection(store_url) as conn:
            conn.execute(
                f"UPDATE effectus_saga_instances SET facts = {mark}{cast} WHERE saga_id = {mark}",
                (deeply_nested(2000), poisoned),
            )
            conn.commit()
        await run_until_idle(config, store_url)

        assert [client.get(saga).state for saga in healthy] == ["completed"] * 5
        [row] = fetch(
            store_url,
            "SELECT state, stop_reason FROM effectus_saga_instances WHERE saga_id = %s",
            poisoned,
        )
        assert row["state"] == "blocked_unknown"
        assert "could not be recorded" in row["stop_reason"]
        [attempt] = attempts_of(store_url, poisoned, "s1")
        assert "RecursionError" in attempt["error"]


async def wait_for_status(http: httpx.AsyncClient, path: str, status: int) -> httpx.Response:
    async with asyncio.timeout(30):
        while (response := await http.get(path)).status_code != status:
            await asyncio.sleep(0.05)
    return response


@pytest.mark.postgres
async def test_a_wedged_recorder_turns_health_red_and_shutdown_stays_bounded(db: str) -> None:
    """A lock held on the saga table stalls every write: the answered call's outcome waits.
    /healthz says so once it waits past unhealthy_after, SIGTERM's drain does not wait on it
    forever, and the next daemon's reclaim settles what was left."""
    answered = threading.Event()
    with running(lambda r: Response(200, {"ok": True}, stall=answered)) as dest:
        config = make_config(
            dest.base_url,
            {"work": {"delivery": "at_least_once"}},
            observability={"http_port": 0, "unhealthy_after": "300ms"},
            dispatcher={"shutdown_grace": "1s", "lease_margin": "1s"},
        )
        client = client_for(config, db)
        saga = client.submit(serial_plan("one", ["work"]), execution_id="x").saga_id
        daemon = Daemon(config, db)
        run = asyncio.create_task(daemon.run())
        async with asyncio.timeout(30):
            while not dest.requests or daemon.http_port is None:
                await asyncio.sleep(0.02)
        locker = await psycopg.AsyncConnection.connect(db)
        await locker.execute("LOCK TABLE effectus_saga_instances IN ACCESS EXCLUSIVE MODE")
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{daemon.http_port}") as http:
                assert (await http.get("/healthz")).status_code == 200
                answered.set()
                red = await wait_for_status(http, "/healthz", 503)
                assert any("waiting to be recorded" in p for p in red.json()["stuck"])
                assert (await http.get("/readyz")).status_code == 503

            daemon.stopping.set()
            await asyncio.wait_for(run, timeout=30)  # returns although the write never can
        finally:
            await locker.rollback()
            await locker.close()

        assert client.get(saga).state == "running"  # the outcome was never recorded
        await run_until_idle(config, db)  # the next daemon reclaims, re-sends with the same key
        view = client.get(saga)
        assert view.state == "completed"
        assert {r.key for r in dest.requests} == {dest.requests[0].key}

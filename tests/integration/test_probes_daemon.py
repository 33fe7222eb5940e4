"""The daemon runs the probe loop: an at_most_once call that times out blocks its saga, and the
probe the daemon sends once the attempt's deadline has passed finds the key committed and
completes the saga by itself, on every store."""

from __future__ import annotations

import asyncio
import logging
import threading
from datetime import UTC, datetime

import httpx
import pytest

from effectusd.client import AsyncClient
from effectusd.core.views import SagaView
from tests.support import backends
from tests.support.destination import Request, Response, running
from tests.support.harness import daemon_running, make_config, run_until_idle, serial_plan

PROBE = {"path": "/keys/{key}", "result": "/answer/body", "after": "0s", "every": "1s"}


async def test_the_daemon_probes_a_blocked_dispatch_and_settles_it(store_url: str) -> None:
    released = threading.Event()
    posts: list[str] = []

    def destination(request: Request) -> Response:
        if request.method == "GET":  # the probe: the key's mutation took effect
            return Response(200, {"state": "committed", "answer": {"body": {"charge_id": "c"}}})
        posts.append(request.key)
        return Response(200, {"charge_id": "c"}, stall=released)  # answered after the timeout

    try:
        with running(destination) as dest:
            config = make_config(dest.base_url, {"pay": {"probe": PROBE}})
            client = AsyncClient(config, database_url=store_url)
            async with daemon_running(config, store_url) as daemon:
                saga = (await client.submit(serial_plan("p", ["pay"]), execution_id="x")).saga_id
                view = await client.wait(saga, timeout=30, until=("completed",))
                probes = daemon.metrics.exposition().decode()
    finally:
        released.set()
    assert view.state == "completed" and view.stop_reason == "resolved by probe as committed"
    assert view.steps[0].result == {"charge_id": "c"}
    assert len(posts) == 1  # sent once; the probe is no attempt
    kinds = [event.kind for event in view.timeline if event.kind.startswith("probe_")]
    assert kinds == ["probe_scheduled", "probe_answered"]
    assert 'effectusd_probes_total{answer="committed",verb="pay"} 1.0' in probes


def probes_due_now(url: str) -> None:
    """Bring every scheduled probe to the past (instead of waiting for its time)."""
    past: object = 946684800.0 if backends.is_sqlite(url) else datetime(2000, 1, 1, tzinfo=UTC)
    marker = "?" if backends.is_sqlite(url) else "%s"
    with backends.connection(url) as conn:
        conn.execute(
            "UPDATE effectus_dispatch_probes SET next_probe_at = "
            f"{marker} WHERE next_probe_at IS NOT NULL",
            (past,),
        )
        conn.commit()


async def show(client: AsyncClient, saga: str) -> SagaView:
    view = await client.get(saga)
    assert view is not None
    return view


def probe_kinds(view: SagaView) -> list[str]:
    return [event.kind for event in view.timeline if event.kind.startswith("probe_")]


async def test_a_call_is_answered_while_a_probe_hangs_with_max_concurrency_one(
    store_url: str,
) -> None:
    """The probe hangs until its timeout (10s) on the destination's one call slot's
    connection; a call to the same destination is answered meanwhile, well within that."""
    released = threading.Event()

    def destination(request: Request) -> Response:
        if request.method == "GET" or request.path == "/pay":  # the probe, the blocking call
            return Response(200, {"state": "committed"}, stall=released)
        return Response(200, {"shipped": True})

    verbs = {"pay": {"probe": PROBE, "timeout": "1s"}, "ship": {}}
    try:
        with running(destination) as dest:
            config = make_config(
                dest.base_url,
                verbs,
                destinations={
                    "dest": {"base_url": dest.base_url, "timeout": "10s", "max_concurrency": 1}
                },
            )
            client = AsyncClient(config, database_url=store_url)
            async with daemon_running(config, store_url):
                hung = (await client.submit(serial_plan("p", ["pay"]), execution_id="a")).saga_id
                await client.wait(hung, timeout=30, until=("blocked_unknown",))
                async with asyncio.timeout(20):
                    while not [r for r in dest.requests if r.method == "GET"]:
                        await asyncio.sleep(0.05)  # polling for the probe to reach the destination
                call = (await client.submit(serial_plan("q", ["ship"]), execution_id="b")).saga_id
                view = await client.wait(call, timeout=5, until=("completed",))
                assert probe_kinds(await show(client, hung)) == ["probe_scheduled"]  # still asking
    finally:
        released.set()
    assert view.state == "completed"


async def test_run_until_idle_sends_a_due_probe_and_records_its_answer_before_it_exits(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    released = threading.Event()

    def destination(request: Request) -> Response:
        if request.method == "GET":
            return Response(200, {"state": "committed", "answer": {"body": {"charge_id": "c"}}})
        return Response(200, {"charge_id": "c"}, stall=released)  # answered after the timeout

    verbs = {"pay": {"probe": {**PROBE, "after": "1h"}, "timeout": "1s"}}
    try:
        with running(destination) as dest:
            config = make_config(dest.base_url, verbs)
            client = AsyncClient(config, database_url=store_url)
            saga = (await client.submit(serial_plan("p", ["pay"]), execution_id="x")).saga_id
            with caplog.at_level(logging.INFO, logger="effectusd.daemon"):
                await run_until_idle(config, store_url)
            blocked = await show(client, saga)
            idle = [r.getMessage() for r in caplog.records if r.getMessage().startswith("idle")]
            probes_due_now(store_url)
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="effectusd.daemon"):
                await run_until_idle(config, store_url)
            said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("probe ")]
            view = await show(client, saga)
            gets = [r for r in dest.requests if r.method == "GET"]
    finally:
        released.set()
    # The first run leaves the probe scheduled an hour later, and says so as it exits.
    assert blocked.state == "blocked_unknown" and probe_kinds(blocked) == ["probe_scheduled"]
    assert len(idle) == 1 and "1 probe(s) scheduled later, the next at " in idle[0]
    # The second takes it at once, and exits only once its answer is recorded.
    assert len(gets) == 1
    assert probe_kinds(view) == ["probe_scheduled", "probe_answered"]
    assert view.state == "completed" and view.stop_reason == "resolved by probe as committed"
    # and says so in one line: a reader of the log does not count the step blocked
    assert said == [
        f"probe 1 of saga {saga} step s1 (forward): HTTP 200: committed; settled as committed"
    ]


async def test_a_probe_path_without_key_is_warned_of_at_start_and_on_readyz_still_ready(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    probe = {**PROBE, "path": "/orders/{args.n}"}  # names the order, not the dispatch
    config = make_config(
        "http://127.0.0.1:9", {"pay": {"probe": probe}}, observability={"http_port": 0}
    )
    warning = (
        "verbs.pay.probe.path names no {key}: one answer is read for every blocked dispatch of "
        "the verb whose arguments and facts fill it alike; put {key} in it"
    )
    with caplog.at_level(logging.WARNING, logger="effectusd.daemon"):
        async with daemon_running(config, store_url) as daemon:
            async with asyncio.timeout(20):
                while daemon.http_port is None or not daemon.started:
                    await asyncio.sleep(0.02)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{daemon.http_port}") as http:
                ready = await http.get("/readyz")
    assert ready.status_code == 200 and ready.json()["warnings"] == [warning]
    assert [r.getMessage() for r in caplog.records].count(warning) == 1

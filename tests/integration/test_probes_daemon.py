"""The daemon runs the probe loop: an at_most_once call that times out blocks its saga, and the
probe the daemon sends once the attempt's deadline has passed finds the key committed and
completes the saga by itself, on every store."""

from __future__ import annotations

import threading

from effectusd.client import AsyncClient
from tests.support.destination import Request, Response, running
from tests.support.harness import daemon_running, make_config, serial_plan

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

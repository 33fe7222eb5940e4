"""Outages ridden out (docs/design.md section 6): a destination that refuses connections for
longer than the old attempt budget (5 attempts, 0.5 s doubling), time compressed by config, is
waited for under the time budget (retry.give_up_after): every saga completes once it is back,
nothing is compensated, no request is duplicated, and X-Effectus-Attempt counts requests
written, not claims that ended before their write."""

from __future__ import annotations

from collections import Counter
from typing import Any

from tests.integration.test_dispatcher_leases import wait_for
from tests.support.destination import come_back, go_down, running
from tests.support.harness import (
    attempts_of,
    client_for,
    daemon_running,
    fetch,
    make_config,
    serial_plan,
)

SAGAS = 6
OLD_BUDGET = 5  # the old default max_attempts, which connection refusals used to spend
# time compressed: backoffs of milliseconds, the old attempt budget kept, a time budget of
# a minute that the outage never reaches
RIDE_OUT = {"initial_backoff": "20ms", "max_backoff": "100ms", "give_up_after": "60s"}


def _destination(base_url: str) -> dict[str, Any]:
    # a connection per call: a restart then only ever refuses (a kept-alive connection the
    # server closed can fail after the write, which is unknown, another test's subject)
    return {"base_url": base_url, "timeout": "2s", "max_concurrency": 16, "keep_alive": False}


def _fewest_claims(url: str, effect: str) -> int:
    rows = fetch(
        url,
        "SELECT attempt FROM effectus_saga_outbox WHERE effect_id = %s AND direction = %s",
        effect,
        "forward",
    )
    return min((row["attempt"] for row in rows), default=0) if len(rows) == SAGAS else 0


def _waiting(client: Any, saga: str) -> str:
    view = client.get(saga)
    return (view and view.step("s1").dispatches[0].waiting) or ""


async def test_destinations_refusing_longer_than_the_old_budget_complete_every_saga_once(
    store_url: str,
) -> None:
    with running() as stock, running() as shipping:
        config = make_config(
            stock.base_url,
            {
                "reserve": {"retry": RIDE_OUT},  # at_most_once
                "release": {"retry": RIDE_OUT},
                "ship": {"destination": "shipping", "delivery": "at_least_once", "retry": RIDE_OUT},
            },
            destinations={
                "dest": _destination(stock.base_url),
                "shipping": _destination(shipping.base_url),
            },
        )
        client = client_for(config, store_url)
        plan = serial_plan("outage", ["reserve", "ship"], {"s1": "release"})
        go_down(stock)
        go_down(shipping)
        sagas = [client.submit(plan, execution_id=f"o-{i}").saga_id for i in range(SAGAS)]
        async with daemon_running(config, store_url) as daemon:
            # every reservation claimed past the old budget while its destination refuses
            await wait_for(lambda: _fewest_claims(store_url, "s1") > OLD_BUDGET, timeout=60)
            # shown as waiting for the destination, not as failing, and counted per destination
            # (one read: between two reads the dispatch may be claimed again, and waits no more)
            shown: list[str] = []

            def waiting_shown() -> bool:
                shown.append(_waiting(client, sagas[0]))
                return "waiting for destination dest since" in shown[-1]

            await wait_for(waiting_shown)
            assert ", gives up at " in shown[-1]
            refused = daemon.metrics.registry.get_sample_value(
                "effectusd_destination_waits_total", {"destination": "dest", "sent": "no"}
            )
            assert refused is not None and refused >= SAGAS * OLD_BUDGET
            come_back(stock)
            await wait_for(lambda: _fewest_claims(store_url, "s2") > OLD_BUDGET, timeout=60)
            come_back(shipping)
            await wait_for(
                lambda: all(getattr(client.get(s), "state", None) == "completed" for s in sagas),
                timeout=60,
            )

        requests = stock.requests + shipping.requests
        assert not stock.seen(direction="compensation")  # nothing undone by the outage
        assert sorted(Counter(r.key for r in requests).values()) == [1] * (2 * SAGAS)
        # each request is the first written under its key, however many claims refused before
        assert {r.attempt for r in requests} == {1}
        for saga in sagas:
            for effect in ("s1", "s2"):
                *refused, sent = attempts_of(store_url, saga, effect)
                assert len(refused) >= OLD_BUDGET
                assert {a["evidence"]["sent"] for a in refused} == {"not_sent"}
                assert sent["outcome"] == "success"

"""Probes bounded on their own, on every store (docs/design.md section 7, Probes): a probe runs
as its own task within its destination's probe_concurrency, so a probe hanging until its
timeout delays no other destination's probe; and a taken probe counts and is held until its
timeout plus the lease margin, so no two probers ask about one dispatch at once, a probe lost
with its daemon still counts, and the probes are given up once. A probe path that a change of
configuration left unrenderable is a probe failure with evidence."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest

from effectusd.config import Config
from effectusd.core.states import OutcomeClass
from effectusd.dispatcher.loops import Loop
from effectusd.dispatcher.metrics import Metrics
from effectusd.dispatcher.probes import Prober
from effectusd.executors.factory import executor_for
from effectusd.operator.probes import Settled
from effectusd.store.dispatch import DispatchStore
from tests.conformance.support import StoreUnderTest, claim_one, completion
from tests.support.destination import Destination, Request, Response, running
from tests.support.harness import make_config, serial_plan

PROBE = {"path": "/keys/{key}", "after": "0s", "every": "1s", "max_probes": 2}
SLOW_TIMEOUT_S = 30  # a hanging probe's: every bound below is well under it


def two_destinations(slow: str, fast: str, ship: dict[str, Any] = PROBE) -> Config:
    """``pay`` probes the slow destination, ``ship`` the fast one (with ``ship``); `every`
    (1s) is far shorter than the slow destination's timeout."""
    return make_config(
        slow,
        {
            "pay": {"destination": "slow", "probe": PROBE},
            "ship": {"destination": "fast", "probe": ship},
        },
        destinations={
            "slow": {"base_url": slow, "timeout": f"{SLOW_TIMEOUT_S}s"},
            "fast": {"base_url": fast, "timeout": "2s"},
        },
    )


def hanging(release: threading.Event, status: int) -> Callable[[Request], Response]:
    """A destination whose probes hang until ``release`` (or the server's own bound), then
    answer ``status``."""
    return lambda request: Response(status, {"state": "committed"}, stall=release)


def committed(request: Request) -> Response:
    return Response(200, {"state": "committed"})


@dataclass
class Scene:
    slow: Destination  # its probes hang until ``release``
    fast: Destination
    release: threading.Event
    late: DispatchStore  # its claims' deadlines ended two minutes ago


@asynccontextmanager
async def scene(store: StoreUnderTest, status: int = 200) -> AsyncIterator[Scene]:
    """The slow destination (its probes hang, then answer ``status``), the fast one, and the
    store configured for both."""
    release = threading.Event()
    try:
        with running(hanging(release, status)) as slow, running(committed) as fast:
            store.config = two_destinations(slow.base_url, fast.base_url)
            late = await store.dispatch_store(owner="late", lease_margin_s=-120.0)
            yield Scene(slow, fast, release, late)
    finally:
        release.set()


async def blocked(store: StoreUnderTest, late: DispatchStore, verb: str, execution: str) -> str:
    """A saga whose one step (``verb``) is blocked_unknown, its deadline long past."""
    destination = store.config.verbs[verb].destination
    saga = store.submit(serial_plan("p", [verb]), execution)
    claim = await claim_one(late, destination)
    report = await late.record([completion(claim, OutcomeClass.UNKNOWN)])
    assert report.applied == 1 and store.view(saga)["state"] == "blocked_unknown"
    return saga


@asynccontextmanager
async def prober_on(store: StoreUnderTest, owner: str) -> AsyncIterator[Prober]:
    daemon = await store.dispatch_store(owner=owner)
    executors = {
        name: executor_for(name, config) for name, config in store.config.destinations.items()
    }
    prober = Prober(store.config, daemon.session, executors, Metrics())
    try:
        yield prober
    finally:
        await prober.drain(0)
        for executor in executors.values():
            await executor.aclose()


async def wait_until(predicate: Callable[[], bool], bound: float = 10.0) -> None:
    deadline = time.monotonic() + bound
    while not predicate():
        assert time.monotonic() < deadline, f"not within {bound}s"
        await asyncio.sleep(0.05)


def kinds(store: StoreUnderTest, saga: str) -> list[str]:
    return [e["kind"] for e in store.view(saga)["timeline"] if e["kind"].startswith("probe_")]


def gets(destination: Destination) -> list[Request]:
    return [r for r in destination.requests if r.method == "GET"]


def probe_row(store: StoreUnderTest) -> tuple[Any, ...]:
    """The one probe row: probes taken, next_probe_at, given_up_at and the database's now."""
    now = store.now_sql()
    [row] = store.execute(
        f"SELECT probes, next_probe_at, given_up_at, {now} FROM effectus_dispatch_probes"
    )
    return row


async def test_a_hanging_probe_does_not_delay_another_destinations_probe(
    store: StoreUnderTest,
) -> None:
    async with scene(store) as at:
        hung = await blocked(store, at.late, "pay", "a")
        async with prober_on(store, "daemon-a") as prober:
            loop = Loop("prober", prober.round, prober.metrics, prober.sleep).start()
            try:
                await wait_until(lambda: len(gets(at.slow)) == 1)  # its probe hangs
                other = await blocked(store, at.late, "ship", "b")
                await wait_until(lambda: store.view(other)["state"] == "completed")
                assert kinds(store, hung) == ["probe_scheduled"]  # still waiting on its answer
            finally:
                loop.cancel()
                await asyncio.gather(loop, return_exceptions=True)
    assert store.view(other)["stop_reason"] == "resolved by probe as committed"


async def test_probes_in_flight_stay_within_the_destinations_probe_concurrency(
    store: StoreUnderTest,
) -> None:
    async with scene(store) as at:
        sagas = [await blocked(store, at.late, "pay", f"x{i}") for i in range(3)]
        async with prober_on(store, "daemon-a") as prober:
            started = await prober.take()
            assert len(started) == 2 == prober.in_flight  # probe_concurrency's default
            assert await prober.take() == []  # no room: the third is not taken
            await wait_until(lambda: len(gets(at.slow)) == 2)
            at.release.set()
            await asyncio.gather(*started)
            assert len(await prober.take()) == 1  # room again: the third is taken now
            await prober.drain(10)
    assert sorted(store.view(saga)["state"] for saga in sagas) == ["completed"] * 3


async def test_a_probe_in_flight_is_not_taken_again_before_its_timeout_and_lease_margin(
    store: StoreUnderTest,
) -> None:
    async with scene(store) as at:
        await blocked(store, at.late, "pay", "a")
        async with prober_on(store, "daemon-a") as first, prober_on(store, "daemon-b") as second:
            [asking] = await first.take()
            await wait_until(lambda: len(gets(at.slow)) == 1)
            probes, next_at, _, now = probe_row(store)
            held = store.config.dispatcher.lease_margin.total_seconds() + SLOW_TIMEOUT_S
            assert probes == 1
            assert seconds_between(now, next_at) > held - 5  # not `every` (1s)
            assert await second.take() == []
            asking.cancel()
        assert len(gets(at.slow)) == 1


async def test_a_probe_lost_with_its_daemon_counts_and_the_probes_are_given_up_once(
    store: StoreUnderTest, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="effectusd.daemon")
    async with scene(store, 500) as at:
        saga = await blocked(store, at.late, "pay", "a")
        async with (
            prober_on(store, "daemon-a") as first,
            prober_on(store, "daemon-b") as second,
            prober_on(store, "daemon-c") as third,
        ):
            lost = []
            for prober, sent in ((first, 1), (second, 2)):  # each dies with its probe unanswered
                lost += await prober.take()
                await wait_until(lambda sent=sent: len(gets(at.slow)) == sent)
                hold_ends_now(store)
            assert await third.take() == []  # max_probes (2) spent: given up, nothing sent
            assert probe_row(store)[0] == 2 and probe_row(store)[2] is not None
            at.release.set()  # the lost probes' answers come late, the last one's too
            assert await asyncio.gather(*lost) == [Settled.KEPT_BLOCKED, Settled.KEPT_BLOCKED]
        assert len(gets(at.slow)) == 2
    assert kinds(store, saga).count("probe_given_up") == 1
    given_up = [r.getMessage() for r in caplog.records if "given up" in r.getMessage()]
    assert given_up == [
        f"probe of saga {saga} step s1 (forward): max_probes 2 spent (probe 2 went unanswered);"
        " probes given up: a person decides (effectusd resolve)"
    ]
    assert store.view(saga)["state"] == "blocked_unknown"


def hold_ends_now(store: StoreUnderTest) -> None:
    """Bring the held probe's next time to now (its hold spent, as after its daemon died)."""
    store.execute(
        "UPDATE effectus_dispatch_probes SET next_probe_at = "
        f"{store.now_sql()} - {store.seconds_sql(1)} WHERE next_probe_at IS NOT NULL"
    )


def seconds_between(start: Any, end: Any) -> float:
    """Seconds from ``start`` to ``end`` (each a datetime, or SQLite's epoch seconds)."""
    return epoch(end) - epoch(start)


def epoch(value: Any) -> float:
    return value.timestamp() if isinstance(value, datetime) else float(value)


async def test_a_probe_path_a_config_change_left_unrenderable_keeps_the_dispatch_blocked(
    store: StoreUnderTest,
) -> None:
    async with scene(store) as at:
        saga = await blocked(store, at.late, "ship", "a")
        changed = {**PROBE, "path": "/keys/{key}/{facts.region}"}  # a fact the saga never had
        store.config = two_destinations(at.slow.base_url, at.fast.base_url, ship=changed)
        async with prober_on(store, "daemon-a") as prober:
            assert await prober.once() == [Settled.KEPT_BLOCKED]
        assert gets(at.fast) == []  # nothing sent
    view = store.view(saga)
    [answered] = [e for e in view["timeline"] if e["kind"] == "probe_answered"]
    assert view["state"] == "blocked_unknown" and answered["detail"]["status"] is None
    assert answered["evidence"] == (
        "no answer: probe path: template '/keys/{key}/{facts.region}': facts.region is not present"
    )

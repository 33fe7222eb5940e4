"""Leases, crashes and several daemons: what happens when a worker is not the only one."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest

from effectusd.core.transition import Completion
from effectusd.executors.httpx_executor import HttpxExecutor
from effectusd.executors.protocol import Invocation
from tests.support import backends
from tests.support.destination import HeldUntilMoreThan, Request, Response, running
from tests.support.harness import (
    attempts_of,
    client_for,
    daemon_running,
    dispatch_of,
    fetch,
    make_config,
    run_until_idle,
    serial_plan,
    spawn_daemon,
    write_config_file,
)

pytestmark = pytest.mark.postgres


class PausedExecutor:
    """Wraps the real executor; the first call waits until the test lets it go (a zombie)."""

    def __init__(self, inner: HttpxExecutor) -> None:
        self.inner = inner
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.completions: list[Completion] = []

    async def call(self, invocation: Invocation) -> Completion:
        if not self.entered.is_set():
            self.entered.set()
            await self.release.wait()
        completion = await self.inner.call(invocation)
        self.completions.append(completion)
        return completion

    async def aclose(self) -> None:
        await self.inner.aclose()


def expire_leases(url: str) -> None:
    """Make every live lease run out now (the database clock decides expiry)."""
    past = (
        "((julianday('now') - 2440587.5) * 86400.0) - 1"  # SQLite keeps epoch seconds
        if backends.is_sqlite(url)
        else "now() - interval '1 second'"
    )
    with backends.connection(url) as conn:
        conn.execute(
            f"UPDATE effectus_saga_outbox SET lease_expires_at = {past} WHERE state = 'in_flight'"
        )


async def wait_for(predicate: Any, timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)


@pytest.mark.parametrize("delivery", ["at_least_once", "at_most_once"])
async def test_late_completion_after_lease_expiry_is_kept_as_evidence(
    store_url: str, delivery: str
) -> None:
    with running() as dest:
        verbs = {"pay": {"delivery": delivery, "retry": {"initial_backoff": "10ms"}}}
        config = make_config(dest.base_url, verbs)
        client = client_for(config, store_url)
        saga = client.submit(serial_plan("zombie", ["pay"]), execution_id="z-1").saga_id

        zombie = PausedExecutor(HttpxExecutor("dest", config.destinations["dest"]))
        async with daemon_running(config, store_url, executors={"dest": zombie}):
            await asyncio.wait_for(zombie.entered.wait(), 20)  # written ahead, call not yet made
            expire_leases(store_url)
            await run_until_idle(config, store_url)  # a second daemon reclaims the expired lease
            zombie.release.set()  # the zombie wakes, calls, and reports attempt 1
            await wait_for(lambda: zombie.completions)
            await wait_for(lambda: attempts_of(store_url, saga, "s1")[0]["late"])

        attempts = attempts_of(store_url, saga, "s1")
        first = attempts[0]
        assert first["outcome"] == "unknown_outcome" and first["settled_by"] == "reclaim"
        assert first["late"] and first["late_outcome"] == "success"
        view = client.get(saga)
        assert view is not None
        if delivery == "at_least_once":
            # the reclaim retried with the same key; the late answer changed nothing
            assert [a["attempt"] for a in attempts] == [1, 2]
            assert attempts[1]["outcome"] == "success"
            assert {r.key for r in dest.requests} == {dest.requests[0].key}
            assert view.state == "completed"
        else:
            # never re-sent; the uncertain attempt's own late answer settles the dispatch
            assert len(attempts) == 1
            assert len(dest.requests) == 1
            assert view.state == "completed"
            assert dispatch_of(store_url, saga, "s1")["state"] == "succeeded"


async def test_late_answer_does_not_settle_when_a_later_attempt_was_sent(store_url: str) -> None:
    with running() as dest:
        verbs = {"pay": {"delivery": "at_least_once", "retry": {"initial_backoff": "10ms"}}}
        config = make_config(dest.base_url, verbs)
        client = client_for(config, store_url)
        saga = client.submit(serial_plan("z2", ["pay"]), execution_id="z-2").saga_id
        zombie = PausedExecutor(HttpxExecutor("dest", config.destinations["dest"]))
        async with daemon_running(config, store_url, executors={"dest": zombie}):
            await asyncio.wait_for(zombie.entered.wait(), 20)
            expire_leases(store_url)
            await run_until_idle(config, store_url)
            zombie.release.set()
            await wait_for(lambda: attempts_of(store_url, saga, "s1")[0]["late"])
        view = client.get(saga)
        assert view is not None
        settled = [e for e in view.timeline if e.kind == "attempt_settled" and e.attempt == 1]
        assert len(settled) == 1  # only the reclaim settled attempt 1; the late answer did not


@pytest.mark.parametrize(
    ("delivery", "final_state", "calls"),
    [("at_most_once", "blocked_unknown", 0), ("at_least_once", "completed", 1)],
)
async def test_daemon_killed_after_write_ahead_leaves_an_uncertain_dispatch(
    store_url: str, tmp_path: Path, delivery: str, final_state: str, calls: int
) -> None:
    with running() as dest:
        verbs = {
            "pay": {"delivery": delivery, "timeout": "1s", "retry": {"initial_backoff": "10ms"}}
        }
        config = make_config(dest.base_url, verbs, dispatcher={"lease_margin": "1s"})
        client = client_for(config, store_url)
        saga = client.submit(serial_plan("kill", ["pay"]), execution_id="k-1").saga_id
        config_file = write_config_file(tmp_path, config)

        victim = spawn_daemon(config_file, store_url, env={"EFFECTUSD_FAULT": "after_write_ahead"})
        assert victim.wait(timeout=30) == -signal.SIGKILL
        [attempt] = attempts_of(store_url, saga, "s1")
        assert attempt["sent_at"] is not None and attempt["outcome"] is None
        assert dest.requests == []

        successor = spawn_daemon(config_file, store_url, "--until-idle")
        assert successor.wait(timeout=60) == 0, successor.stderr.read() if successor.stderr else ""
        first = attempts_of(store_url, saga, "s1")[0]
        assert first["outcome"] == "unknown_outcome" and first["settled_by"] == "reclaim"
        view = client.get(saga)
        assert view is not None and view.state == final_state, view.stop_reason
        assert len(dest.requests) == calls


async def test_two_daemon_processes_share_the_work_without_double_claims(
    store_url: str, tmp_path: Path
) -> None:
    # Each daemon has 16 slots. The first calls wait until a 17th is in flight at once, which
    # only the other daemon can send: so both daemons certainly work, whoever starts first.
    until_both_work = HeldUntilMoreThan(16)

    with running(until_both_work) as dest:
        config = make_config(
            dest.base_url,
            {"a": {}, "b": {}},
            destinations={"dest": {"base_url": dest.base_url, "timeout": "40s"}},
        )
        client = client_for(config, store_url)
        sagas = [
            client.submit(serial_plan("race", ["a", "b"]), execution_id=f"r-{i}").saga_id
            for i in range(200)
        ]
        config_file = write_config_file(tmp_path, config)
        daemons = [spawn_daemon(config_file, store_url, "--until-idle") for _ in range(2)]
        for daemon in daemons:
            assert daemon.wait(timeout=120) == 0, daemon.stderr.read() if daemon.stderr else ""

        states = fetch(
            store_url,
            "SELECT state, count(*) AS n, min(stop_reason) AS why"
            " FROM effectus_saga_instances GROUP BY state",
        )
        assert [(s["state"], s["n"]) for s in states] == [("completed", len(sagas))], states
        per_attempt = Counter((r.key, r.attempt) for r in dest.requests)
        assert len(per_attempt) == 400 and set(per_attempt.values()) == {1}
        owners = fetch(store_url, "SELECT DISTINCT lease_owner FROM effectus_saga_attempts")
        assert len(owners) == 2  # both daemons really worked
        assert (
            fetch(store_url, "SELECT count(*) AS n FROM effectus_saga_attempts WHERE attempt > 1")[
                0
            ]["n"]
            == 0
        )


@pytest.mark.parametrize("signals", [1, 2], ids=["once", "twice-at-once"])
async def test_sigterm_drains_in_flight_calls_and_exits_zero(
    store_url: str, tmp_path: Path, signals: int
) -> None:
    # Twice at once is one stop request delivered twice (a service manager signalling the
    # whole control group, and `run --processes` forwarding it): still a drain, not an exit.
    entered = threading.Event()
    release = threading.Event()

    def slow(request: Request) -> Response:
        entered.set()
        release.wait(10)
        return Response(200, {"ok": True})

    with running(slow) as dest:
        config = make_config(dest.base_url, {"pay": {}})
        client = client_for(config, store_url)
        saga = client.submit(serial_plan("term", ["pay"]), execution_id="t-1").saga_id
        daemon = spawn_daemon(write_config_file(tmp_path, config), store_url)
        assert await asyncio.to_thread(entered.wait, 30)
        assert daemon.stderr is not None
        for _ in range(signals):  # each after the one before was handled (no coalescing)
            daemon.send_signal(signal.SIGTERM)
            while b"draining" not in (line := daemon.stderr.readline()):
                assert line, "the daemon ended without draining"
        release.set()
        assert daemon.wait(timeout=30) == 0
        [attempt] = attempts_of(store_url, saga, "s1")
        assert attempt["outcome"] == "success"
        assert len(dest.requests) == 1


async def test_listen_connection_heals_and_polling_covers_the_gap(db: str) -> None:
    with running() as dest:
        config = make_config(dest.base_url, {"pay": {}})
        client = client_for(config, db)
        async with daemon_running(config, db) as daemon:
            await wait_for(lambda: daemon.listening)
            with psycopg.connect(db, autocommit=True) as conn:
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    " AND query ILIKE 'LISTEN effectus_outbox%%'"
                )
            await wait_for(lambda: not daemon.listening)
            saga = client.submit(serial_plan("heal", ["pay"]), execution_id="h-1").saga_id
            await wait_for(lambda: getattr(client.get(saga), "state", None) == "completed")
            await wait_for(lambda: daemon.listening)
        assert len(dest.requests) == 1

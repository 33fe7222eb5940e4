"""Fencing through a running daemon on PostgreSQL: waiting for a held resource, zombies and
stale answers, what attempts show. Provider-level tests (tokens, leases, partial
acquisitions) are in tests/conformance/test_fencing.py, for every store."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from effectusd.cli import main
from effectusd.cli.render import saga_detail
from effectusd.core.canonical import parse_json
from effectusd.executors.httpx_executor import HttpxExecutor
from tests.conformance.support import StoreUnderTest
from tests.integration.test_dispatcher_leases import PausedExecutor, expire_leases, wait_for
from tests.support import backends
from tests.support.destination import Request, Response, running
from tests.support.harness import (
    attempts_of,
    client_for,
    daemon_running,
    make_config,
    run_until_idle,
    serial_plan,
    write_config_file,
)
from tests.support.tokens import TOKEN_SPAN, database_clock, ticks

pytestmark = pytest.mark.postgres


def fenced_plan(account: str, n: int) -> dict[str, object]:
    return {
        "plan_id": "fenced",
        "steps": [
            {
                "id": "charge",
                "verb": "charge",
                "args": {"account_id": account, "n": n},
                "compensate": "none",
            }
        ],
    }


def watermarks() -> tuple[dict[str, int], threading.Lock]:
    return {}, threading.Lock()


def enforcing(
    marks: dict[str, int], lock: threading.Lock, stall: dict[int, threading.Event] | None = None
):  # type: ignore[no-untyped-def]
    """A destination that keeps a watermark per resource and rejects lower tokens as stale."""

    def handler(request: Request) -> Response:
        if stall and request.attempt in stall:
            stall[request.attempt].wait(20)
        grants = parse_json(request.headers["x-effectus-fencing-grants"])
        with lock:
            for grant in grants:
                if grant["token"] < marks.get(grant["resource"], 0):
                    return Response(409, {"error": "stale"}, {"X-Effectus-Outcome": "stale_fence"})
            for grant in grants:
                marks[grant["resource"]] = grant["token"]
        return Response(
            200, {"tokens": [g["token"] for g in grants]}, {"X-Effectus-Fencing": "acknowledged"}
        )

    return handler


async def test_second_saga_on_the_same_account_waits_then_gets_a_larger_token(db: str) -> None:
    marks, lock = watermarks()
    first_in = threading.Event()
    release_first = threading.Event()
    inner = enforcing(marks, lock)

    def handler(request: Request) -> Response:
        if request.json()["n"] == 1:
            first_in.set()
            release_first.wait(20)
        return inner(request)

    with running(handler) as dest:
        verbs = {
            "charge": {
                "fencing": ["account:{args.account_id}"],
                "delivery": "at_least_once",
                "retry": {"max_attempts": 50, "initial_backoff": "20ms", "max_backoff": "50ms"},
            }
        }
        config = make_config(dest.base_url, verbs)
        client = client_for(config, db)
        first = client.submit(fenced_plan("acc-9", 1), execution_id="f-1").saga_id
        async with daemon_running(config, db):
            assert await asyncio.to_thread(first_in.wait, 20)
            second = client.submit(fenced_plan("acc-9", 2), execution_id="f-2").saga_id
            await wait_for(lambda: len(attempts_of(db, second, "charge")) >= 2)
            release_first.set()
            await wait_for(lambda: getattr(client.get(second), "state", None) == "completed")
        waits = attempts_of(db, second, "charge")[:-1]
        assert all(a["outcome"] == "retryable_failure_known_not_committed" for a in waits)
        assert all("held by another live dispatch" in a["error"] for a in waits)
        assert all(a["fencing_status"] is None for a in waits)
        assert [r.json()["n"] for r in dest.requests] == [1, 2]  # the waiting saga sent nothing
        first_token = attempts_of(db, first, "charge")[0]["grants"][0]["token"]
        second_token = attempts_of(db, second, "charge")[-1]["grants"][0]["token"]
        assert second_token > first_token
        assert attempts_of(db, second, "charge")[-1]["fencing_status"] == "acknowledged"


def _waiting(client: Any, saga: str) -> str:
    view = client.get(saga)
    return (view and view.step("charge").dispatches[0].waiting) or ""


async def test_a_fence_wait_is_not_an_attempt_the_request_and_the_views_count(db: str) -> None:
    first_in, release_first = threading.Event(), threading.Event()

    def handler(request: Request) -> Response:
        if request.json()["n"] == 1:
            first_in.set()
            release_first.wait(20)
        return Response(200, {"ok": True})

    with running(handler) as dest:
        retry = {"max_attempts": 4, "initial_backoff": "20ms", "max_backoff": "50ms"}
        verbs = {"charge": {"fencing": ["account:{args.account_id}"], "retry": retry}}
        config = make_config(dest.base_url, verbs)
        client = client_for(config, db)
        first = client.submit(fenced_plan("acc-7", 1), execution_id="w-1").saga_id
        async with daemon_running(config, db):
            assert await asyncio.to_thread(first_in.wait, 20)
            second = client.submit(fenced_plan("acc-7", 2), execution_id="w-2").saga_id
            # more waits than max_attempts: none of them is an attempt
            await wait_for(lambda: len(attempts_of(db, second, "charge")) > 5)
            # the live wait, read from the row, is what the view says it waits for
            await wait_for(
                lambda: "waiting for a fencing resource since" in _waiting(client, second)
            )
            release_first.set()
            await wait_for(lambda: getattr(client.get(second), "state", None) == "completed")

        [sent] = [r for r in dest.requests if r.json()["n"] == 2]
        assert sent.attempt == 1  # X-Effectus-Attempt counts requests written
        view = client.get(second)
        assert view is not None
        [dispatch] = view.step("charge").dispatches
        assert (dispatch.requests, dispatch.max_attempts) == (1, 4)
        assert dispatch.attempt > 5 and dispatch.fence_waits == dispatch.attempt - 1
        assert [a.not_sent for a in dispatch.attempts] == [True] * (dispatch.attempt - 1) + [False]
        text = saga_detail(view)
        assert "attempt 1/4" in text and "not sent" in text
        waits = [e for e in view.timeline if e.kind.startswith("fence_wait")]
        assert [e.kind for e in waits] == ["fence_wait_started", "fence_wait_ended"]
        assert waits[0].detail["resource"] == "account:acc-7"
        assert f"saga {first}" in str(waits[0].detail["holder"])
        assert waits[1].detail == {"ended": "sent", "waits": dispatch.fence_waits}


async def test_zombie_attempt_is_rejected_stale_and_the_saga_still_completes(db: str) -> None:
    marks, lock = watermarks()
    with running(enforcing(marks, lock)) as dest:
        verbs = {
            "charge": {
                "fencing": ["account:{args.account_id}"],
                "delivery": "at_least_once",
                "retry": {"initial_backoff": "10ms"},
            }
        }
        config = make_config(dest.base_url, verbs)
        client = client_for(config, db)
        saga = client.submit(fenced_plan("acc-1", 1), execution_id="z-1").saga_id
        zombie = PausedExecutor(HttpxExecutor("dest", config.destinations["dest"]))
        async with daemon_running(config, db, executors={"dest": zombie}):
            await asyncio.wait_for(zombie.entered.wait(), 20)
            expire_leases(db)
            await run_until_idle(config, db)  # attempt 2, larger token, succeeds
            zombie.release.set()  # attempt 1 finally reaches the destination
            await wait_for(lambda: attempts_of(db, saga, "charge")[0]["late"])

        first, second = attempts_of(db, saga, "charge")
        assert (
            second["outcome"] == "success"
            and second["grants"][0]["token"] > first["grants"][0]["token"]
        )
        assert first["late_outcome"] == "stale_fence"
        assert [r.attempt for r in dest.requests] == [2, 1]
        view = client.get(saga)
        assert view is not None and view.state == "completed"


async def test_stale_rejection_of_the_current_attempt_blocks_after_one_call(db: str) -> None:
    def stale(request: Request) -> Response:
        return Response(409, {"error": "stale"}, {"X-Effectus-Outcome": "stale_fence"})

    with running(stale) as dest:
        verbs = {"charge": {"fencing": ["account:{args.account_id}"], "delivery": "at_least_once"}}
        config = make_config(dest.base_url, verbs)
        client = client_for(config, db)
        saga = client.submit(fenced_plan("acc-2", 1), execution_id="s-1").saga_id
        await run_until_idle(config, db)
        assert len(dest.requests) == 1
        view = client.get(saga)
        assert view is not None and view.state == "blocked_fence"
        [attempt] = attempts_of(db, saga, "charge")
        assert attempt["fencing_status"] == "stale_rejected"
        with psycopg.connect(db) as conn:
            assert conn.execute("SELECT count(*) FROM effectus_fencing_leases").fetchone() == (0,)


async def test_grants_are_sent_and_shown_as_propagated_when_the_destination_is_silent(
    db: str,
) -> None:
    with running() as dest:
        verbs = {"charge": {"fencing": ["account:{args.account_id}", "order:{args.n}"]}}
        config = make_config(dest.base_url, verbs)
        client = client_for(config, db)
        saga = client.submit(fenced_plan("acc-3", 7), execution_id="p-1").saga_id
        floor = ticks(database_clock(db))
        await run_until_idle(config, db)
        [request] = dest.requests
        grants = parse_json(request.headers["x-effectus-fencing-grants"])
        assert [g["resource"] for g in grants] == ["account:acc-3", "order:7"]
        # each resource's first token: above the database clock's floor, on timeline 1
        assert all(floor < g["token"] < TOKEN_SPAN for g in grants)
        view = client.get(saga)
        assert view is not None
        assert view.steps[0].dispatches[0].attempts[0].fencing_status == "propagated"


def test_daemon_refuses_the_memory_provider_outside_a_test_setup(db: str, tmp_path: Path) -> None:
    config = make_config("http://127.0.0.1:9", {"charge": {}})
    path = write_config_file(tmp_path, config)
    path.write_text(path.read_text() + '[fencing]\nprovider = "memory"\n')
    result = CliRunner().invoke(
        main, ["--config", str(path), "--database-url", db, "run", "--until-idle"]
    )
    assert result.exit_code == 3
    assert "local_advisory" in result.output and "test_setup" in result.output


async def test_memory_provider_in_a_test_setup_marks_attempts_local_lock_only(db: str) -> None:
    with running() as dest:
        verbs = {"charge": {"fencing": ["account:{args.account_id}"]}}
        config = make_config(
            dest.base_url, verbs, fencing={"provider": "memory", "test_setup": True}
        )
        client = client_for(config, db)
        saga = client.submit(fenced_plan("acc-4", 1), execution_id="m-1").saga_id
        await run_until_idle(config, db)
        [attempt] = attempts_of(db, saga, "charge")
        assert attempt["fencing_status"] == "local_lock_only" and attempt["outcome"] == "success"
        with psycopg.connect(db) as conn:  # nothing durable was written for it
            assert conn.execute("SELECT count(*) FROM effectus_fencing_counters").fetchone() == (0,)


def lock_waiters(db: str) -> int:
    """Backends of this database waiting for a lock right now."""
    with psycopg.connect(db, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()
    return int(row[0]) if row else 0


async def test_two_write_ahead_batches_over_shared_resources_in_opposite_orders_never_deadlock(
    db: str,
) -> None:
    store = StoreUnderTest("postgres", db)
    try:
        sagas = [store.submit(serial_plan("f", ["fenced"]), f"d-{n}") for n in range(4)]
        # batch A takes res:2 then res:1, batch B res:1 then res:2 (one resource per claim,
        # so each claim's own canonical order cannot help)
        for saga, resource in zip(sagas, ["res:2", "res:1", "res:1", "res:2"], strict=True):
            store.execute(
                "UPDATE effectus_saga_outbox SET fencing_resources = %s WHERE saga_id = %s",
                (json.dumps([resource]), saga),
            )
        store.execute(
            "INSERT INTO effectus_fencing_counters (resource, last_token)"
            " VALUES ('res:1', 0), ('res:2', 0)"
        )
        daemon = await store.dispatch_store()
        claims = sorted(await daemon.claim({"dest": 10}), key=lambda c: c.dispatch_id)
        batches = {"A": claims[:2], "B": claims[2:]}
        results: dict[str, object] = {}

        def write_ahead(name: str) -> None:
            try:
                with backends.connection(db) as conn:
                    results[name] = backends.run(conn, daemon._write_ahead(batches[name]))
            except BaseException as exc:  # noqa: BLE001 - asserted below
                results[name] = exc

        # A gate holds res:2 so that A waits on it first and B then waits too; with the old
        # per-claim order B held res:1 meanwhile and the release deadlocked A against B.
        with psycopg.connect(db) as gate:
            gate.execute(
                "SELECT 1 FROM effectus_fencing_counters WHERE resource = 'res:2' FOR UPDATE"
            )
            threads = {name: threading.Thread(target=write_ahead, args=(name,)) for name in "AB"}
            threads["A"].start()
            await wait_for(lambda: lock_waiters(db) == 1)
            threads["B"].start()
            await wait_for(lambda: lock_waiters(db) == 2)
            gate.commit()
        for thread in threads.values():
            await asyncio.to_thread(thread.join, 30)
        assert not isinstance(results["A"], BaseException), results["A"]
        assert not isinstance(results["B"], BaseException), results["B"]
        ready_a, busy_a = results["A"]  # type: ignore[misc]
        ready_b, busy_b = results["B"]  # type: ignore[misc]
        assert [w.claim.dispatch_id for w in ready_a] == [c.dispatch_id for c in claims[:2]]
        assert busy_a == [] and ready_b == []
        assert sorted(c.dispatch_id for c in busy_b) == [c.dispatch_id for c in claims[2:]]
    finally:
        await store.close()

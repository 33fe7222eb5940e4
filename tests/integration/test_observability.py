"""Metrics, health and logs of a real daemon."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import httpx
import pytest

from tests.support.destination import Request, Response, ok, running
from tests.support.harness import (
    client_for,
    daemon_running,
    make_config,
    serial_plan,
    spawn_daemon,
    write_config_file,
)

pytestmark = pytest.mark.postgres


async def wait_until(predicate, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one Prometheus sample in an exposition text."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, value = line.rsplit(" ", 1)
        if all(f'{key}="{val}"' in head for key, val in labels.items()):
            return float(value)
    raise AssertionError(f"no sample {name} {labels}")


async def test_metrics_health_and_readiness_are_served_over_http(db: str) -> None:
    def flaky(request: Request) -> Response:
        if request.effect == "s2":
            return Response(422, {}, {"X-Effectus-Outcome": "permanent_failure"})
        return ok(request)

    with running(flaky) as dest:
        config = make_config(dest.base_url, {"do": {}, "undo": {}}, observability={"http_port": 0})
        client = client_for(config, db)
        saga = client.submit(
            serial_plan("obs", ["do", "do"], compensate={"s1": "undo"}), execution_id="o-1"
        ).saga_id
        async with daemon_running(config, db) as daemon:
            await wait_until(lambda: daemon.http_port is not None)
            await wait_until(lambda: getattr(client.get(saga), "state", None) == "compensated")
            base = f"http://127.0.0.1:{daemon.http_port}"
            async with httpx.AsyncClient(base_url=base) as http:
                metrics = (await http.get("/metrics")).text
                health = await http.get("/healthz")
                ready = await http.get("/readyz")
                missing = await http.get("/nope")

        labels = {"destination": "dest", "verb": "do", "direction": "forward"}
        assert sample(metrics, "effectusd_outcomes_total", **labels, outcome="success") == 1
        assert (
            sample(metrics, "effectusd_outcomes_total", **labels, outcome="permanent_failure") == 1
        )
        assert (
            sample(
                metrics,
                "effectusd_outcomes_total",
                destination="dest",
                verb="undo",
                direction="compensation",
                outcome="success",
            )
            == 1
        )
        assert (
            sample(metrics, "effectusd_call_duration_seconds_count", destination="dest", verb="do")
            == 2
        )
        assert (
            sample(metrics, "effectusd_enqueue_to_dispatch_seconds_count", destination="dest") == 3
        )
        assert (
            "effectusd_ready_queue_depth" in metrics
            and "effectusd_late_completions_total" in metrics
        )
        assert health.status_code == 200 and health.json()["database"] == "ok"
        assert ready.status_code == 200 and ready.json()["started"] is True
        assert missing.status_code == 404


async def test_readiness_fails_while_draining_but_health_holds(db: str) -> None:
    import threading

    entered, release = threading.Event(), threading.Event()

    def slow(request: Request) -> Response:
        entered.set()
        release.wait(20)
        return ok(request)

    with running(slow) as dest:
        config = make_config(dest.base_url, {"do": {}}, observability={"http_port": 0})
        client = client_for(config, db)
        client.submit(serial_plan("drain", ["do"]), execution_id="d-1")
        async with daemon_running(config, db) as daemon:
            await wait_until(lambda: daemon.http_port is not None)
            assert await asyncio.to_thread(entered.wait, 20)
            daemon.stopping.set()  # draining: the in-flight call holds the daemon open
            base = f"http://127.0.0.1:{daemon.http_port}"
            async with httpx.AsyncClient(base_url=base) as http:
                ready = await http.get("/readyz")
                health = await http.get("/healthz")
            release.set()
        assert ready.status_code == 503 and ready.json()["draining"] is True
        assert health.status_code == 200


def test_logs_carry_one_json_line_per_transition_and_never_secrets_or_argument_values(
    db: str, tmp_path: Path
) -> None:
    secret = "tok-" + os.urandom(8).hex()
    marker = "arg-" + os.urandom(8).hex()
    with running() as dest:
        config = make_config(
            dest.base_url,
            {"pay": {"path": "/pay/{args.order}"}},
            destinations={
                "dest": {"base_url": dest.base_url, "bearer_token_env": "OBS_TEST_TOKEN"}
            },
        )
        client = client_for(config, db)
        plan = {
            "plan_id": "logs",
            "steps": [
                {
                    "id": "pay",
                    "verb": "pay",
                    "args": {"order": marker, "note": marker},
                    "compensate": "none",
                }
            ],
        }
        saga = client.submit(plan, execution_id="l-1").saga_id
        daemon = spawn_daemon(
            write_config_file(tmp_path, config),
            db,
            "--until-idle",
            "--log-format",
            "json",
            env={"OBS_TEST_TOKEN": secret},
        )
        _, stderr = daemon.communicate(timeout=60)
        assert daemon.returncode == 0
        assert dest.requests[0].headers["authorization"] == f"Bearer {secret}"

    text = stderr.decode()
    assert secret not in text
    assert marker not in text
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    transitions = [line for line in lines if line.get("saga_id") == saga]
    assert len(transitions) == 1
    assert transitions[0]["effect_id"] == "pay" and transitions[0]["attempt"] == 1
    assert transitions[0]["outcome"] == "success" and transitions[0]["saga_state"] == "completed"

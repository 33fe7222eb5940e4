"""The destinations a chaos scenario runs against, their config, the plans routed over them,
and the checks that only hostile destinations need.

Healthy destinations are tests/chaos/destination.py processes (the kit); a scenario with
``hostile`` behaviours adds one tests/chaos/hostile.py destination per behaviour. Healthy sagas
(execution IDs ``h-``) call healthy verbs only and must complete; hostile sagas (``x-``) put a
hostile step between two healthy ones, and every other one fails its last step, so the hostile
step's compensation is called too.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from typing import Any

from tests.chaos import fan_out, probes, retention
from tests.chaos.scenarios import DAEMON_CONCURRENCY, Scenario

HOSTILE = "hostile_"
# Sent as a bearer token to hostile destinations; one of them echoes it in X-Effectus-Outcome.
TOKEN_ENV = "EFFECTUSD_CHAOS_TOKEN"
TOKEN = secrets.token_hex(16)
PROPER_RESULT = {"ok": True}  # the only body a hostile destination's proper answer holds
TERMINAL = ("completed", "compensated", "failed")
FENCED = "slot"  # the failover plans' fenced resources: slot:0 … slot:3
FENCED_SLOTS = 4
_RETRY = '{ max_attempts = 30, initial_backoff = "20ms", max_backoff = "300ms" }'
_HOSTILE_RETRY = '{ max_attempts = 3, initial_backoff = "20ms", max_backoff = "100ms" }'

Rows = Callable[[str, str], list[dict[str, Any]]]


def healthy_names(scenario: Scenario) -> list[str]:
    if scenario.mode == "lookup":
        return [probes.NAME]
    if scenario.healthy == 1:
        return ["chaos"]
    return [f"healthy{i}" for i in range(1, scenario.healthy + 1)]


def hostile_names(scenario: Scenario) -> list[str]:
    return [HOSTILE + behaviour for behaviour in scenario.hostile]


def config_text(ports: dict[str, int], scenario: Scenario) -> str:
    if scenario.mode == "lookup":
        return probes.config_text(ports)
    parts = [
        f"[dispatcher]\nconcurrency = {DAEMON_CONCURRENCY}\n"
        f'lease_margin = "{scenario.lease_margin}s"\n'
        'poll_interval = "100ms"\n'
        'shutdown_grace = "5s"\n'
    ]
    for index, (name, port) in enumerate(ports.items()):
        hostile = name.startswith(HOSTILE)
        parts.append(
            f'[destinations.{name}]\nbase_url = "http://127.0.0.1:{port}"\ntimeout = "1s"\n'
            f'connect_timeout = "500ms"\nmax_concurrency = {_max_concurrency(scenario)}\n'
        )
        if hostile:
            # every HTTP transport meets the hostile behaviours, in turn
            transport = ("asyncio", "aiohttp", "httpx")[index % 3]
            parts.append(f'bearer_token_env = "{TOKEN_ENV}"\ntransport = "{transport}"\n')
        probed = scenario.probes and not hostile
        if probed:  # the kit commits nothing past a deadline plus its clock_skew (5 s)
            parts.append("honours_deadline = true\n")
        delivery = "at_least_once" if hostile else scenario.delivery
        retry = _HOSTILE_RETRY if hostile else _RETRY
        parts.extend(
            f'[verbs."{name}.{verb}"]\ndestination = "{name}"\npath = "/{verb}"\n'
            f'delivery = "{delivery}"\nretry = {retry}\n'
            + (probes.kit_probe(f"{name}.{verb}") if probed else "")
            for verb in ("do", "undo")
        )
        if (scenario.failover or scenario.retention) and not hostile:
            parts.append(
                f'[verbs."{name}.fenced"]\ndestination = "{name}"\npath = "/fenced"\n'
                f'delivery = "at_least_once"\nretry = {retry}\n'
                f'fencing = ["{FENCED}:{{args.slot}}"]\n'
                f'[verbs."{name}.once"]\ndestination = "{name}"\npath = "/once"\n'
                f'delivery = "at_most_once"\nretry = {retry}\n'
            )
    return "".join(parts)


def _max_concurrency(scenario: Scenario) -> int:
    return scenario.max_concurrency or (4 if scenario.failover else 16)


def _step(i: int, destination: str, fail: bool) -> dict[str, Any]:
    return {
        "id": f"s{i}",
        "verb": f"{destination}.do",
        "args": {"i": i, "fail": fail},
        "compensate": {"verb": f"{destination}.undo", "args": {"i": i}},
    }


def _failover_plan(destination: str, index: int, fail_every: int) -> tuple[str, dict[str, Any]]:
    """A fenced step on one of FENCED_SLOTS resources shared by many sagas, an at_most_once
    step, then a step that fails in every ``fail_every``th saga (compensation)."""
    undo = {"verb": f"{destination}.undo", "args": {"i": 0}}
    steps = [
        {
            "id": "fenced",
            "verb": f"{destination}.fenced",
            "args": {"slot": index % FENCED_SLOTS, "fail": False},
            "compensate": undo,
        },
        {
            "id": "once",
            "verb": f"{destination}.once",
            "args": {"i": index, "fail": False},
            "compensate": undo,
        },
        _step(3, destination, fail_every > 0 and index % fail_every == 0),
    ]
    return f"f-{index}", {"plan_id": "chaos-failover", "steps": steps}


def plan(scenario: Scenario, index: int) -> tuple[str, dict[str, Any]]:
    """The execution ID and plan of the scenario's ``index``th saga."""
    healthy = healthy_names(scenario)
    if scenario.fan_out:
        return fan_out.plan(healthy[0], index, scenario.fail_every)
    if scenario.failover:
        return _failover_plan(healthy[0], index, scenario.fail_every)
    if scenario.mode == "lookup":
        return probes.plan(index, scenario.fail_every)
    if scenario.retention:
        return retention.plan(healthy, index, scenario.fail_every)
    if not scenario.hostile:
        fail = scenario.fail_every > 0 and index % scenario.fail_every == 0
        steps = [
            _step(i, healthy[0], fail and i == scenario.steps) for i in range(1, scenario.steps + 1)
        ]
        return f"c-{index}", {"plan_id": f"chaos-{scenario.steps}", "steps": steps}
    if index % 2 == 0:
        steps = [_step(i, healthy[(index + i) % len(healthy)], False) for i in range(1, 4)]
        return f"h-{index}", {"plan_id": "chaos-healthy", "steps": steps}
    hostile = hostile_names(scenario)
    turn = index // 2
    steps = [
        _step(1, healthy[turn % len(healthy)], False),
        _step(2, hostile[turn % len(hostile)], False),
        _step(3, healthy[(turn + 1) % len(healthy)], (turn // len(hostile)) % 2 == 1),
    ]
    return f"x-{index}", {"plan_id": "chaos-hostile", "steps": steps}


def check_hostile(
    violations: list[str], scenario: Scenario, url: str, rows: Rows, served: dict[str, int]
) -> None:
    """Healthy sagas all completed; hostile ones ended named; no hostile body was taken as a
    result; the bearer token never reached the store; every behaviour was exercised."""
    for row in rows(url, "SELECT saga_id, execution_id, state FROM effectus_saga_instances"):
        state, saga = row["state"], row["saga_id"][:12]
        if row["execution_id"].startswith("h-") and state != "completed":
            violations.append(f"healthy saga {saga} ended {state}")
        if not (state in TERMINAL or state.startswith("blocked_")):
            violations.append(f"hostile saga {saga} ended {state}, not a named end")
    results = rows(
        url,
        # a step's result is its forward dispatch's (migration 10016)
        "SELECT o.verb, o.result FROM effectus_saga_outbox o WHERE o.result IS NOT NULL",
    )
    for row in results:
        result = json.loads(row["result"]) if isinstance(row["result"], str) else row["result"]
        if row["verb"].startswith(HOSTILE) and result != PROPER_RESULT:
            violations.append(f"{row['verb']}: a hostile answer became a step's result")
    leaked = rows(
        url,
        "SELECT count(*) AS n FROM effectus_saga_attempts WHERE"
        f" CAST(evidence AS text) LIKE '%{TOKEN}%' OR error LIKE '%{TOKEN}%'"
        f" OR CAST(late_evidence AS text) LIKE '%{TOKEN}%' OR late_error LIKE '%{TOKEN}%'",
    )
    leaked += rows(
        url,
        f"SELECT count(*) AS n FROM effectus_saga_outbox WHERE last_error LIKE '%{TOKEN}%'",
    )
    leaked += rows(
        url,
        "SELECT count(*) AS n FROM effectus_saga_events WHERE"
        f" evidence LIKE '%{TOKEN}%' OR CAST(detail AS text) LIKE '%{TOKEN}%'",
    )
    if sum(int(row["n"]) for row in leaked):
        violations.append("the bearer token a destination echoed reached the store")
    for behaviour in scenario.hostile:
        if not served.get(behaviour):
            violations.append(f"hostile behaviour {behaviour} never ran: the check proves nothing")

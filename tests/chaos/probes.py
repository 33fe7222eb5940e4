"""Issue 30's probe row: ``at_most_once`` against a plain destination that honours deadlines
and offers a lookup (tests/chaos/lookup_destination.py), daemons dying at every point; its
verbs probe ``GET /lookup/{key}`` (docs/design.md section 7, Probes). Checked: no key executed
twice, and no saga left blocked once the probes ran (the drive and the settling daemon wait
for every blocked dispatch's probes: ``pending``). A row of kit destinations may probe too
(``Scenario.probes``: ``kit_probe``, the kit's ``GET /effectus/keys/{key}``).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from typing import Any

from tests.chaos.scenarios import DAEMON_CONCURRENCY, Report, Scenario

NAME = "lookup"  # the destination, and its verbs lookup.do / lookup.undo
TABLE = "lookup_effects"  # one row per business effect, in the service's transaction
SKEW = 1.0  # the service's --clock-skew and the destination's clock_skew, seconds
_RETRY = '{ max_attempts = 30, initial_backoff = "20ms", max_backoff = "300ms" }'
# Probes this long past an attempt's deadline (its lease end), then every second (the least
# allowed), at most 20 times: a "not committed" is acted on from deadline + SKEW on.
_PROBE_TIMES = f'after = "{SKEW + 1:g}s"\nevery = "1s"\nmax_probes = 20\n'
Rows = Callable[[str, str], list[dict[str, Any]]]


def service(scenario: Scenario, dest_url: str) -> tuple[str, ...]:
    """The lookup service's module and arguments (runner._start)."""
    return (
        "tests.chaos.lookup_destination",
        *("--port", "0", "--database-url", dest_url, "--clock-skew", f"{SKEW:g}"),
        *("--stall-after-commit", str(scenario.stall_after_commit)),
        *("--reset-after-commit", str(scenario.reset_after_commit)),
    )


def config_text(ports: dict[str, int]) -> str:
    """The daemons' config: the lookup destination declares it honours deadlines, and each
    verb probes ``GET /lookup/{key}`` once its attempt's deadline plus SKEW (and a margin)
    has passed: 200 committed (the stored answer's body is the result); 404 (unknown) and 422
    (a stored refusal, replayed to a retry under the key) not committed."""
    port = ports[NAME]
    parts = [
        f'[dispatcher]\nconcurrency = {DAEMON_CONCURRENCY}\nlease_margin = "1s"\n'
        'poll_interval = "100ms"\n'
        'shutdown_grace = "5s"\n',
        f'[destinations.{NAME}]\nbase_url = "http://127.0.0.1:{port}"\ntimeout = "1s"\n'
        'connect_timeout = "500ms"\nmax_concurrency = 16\nhonours_deadline = true\n'
        f'clock_skew = "{SKEW:g}s"\n',
    ]
    for verb in ("do", "undo"):
        delivery = "at_most_once" if verb == "do" else "at_least_once"
        parts.append(
            f'[verbs."{NAME}.{verb}"]\ndestination = "{NAME}"\npath = "/{verb}"\n'
            f'delivery = "{delivery}"\nretry = {_RETRY}\n'
            f'[verbs."{NAME}.{verb}".probe]\npath = "/lookup/{{key}}"\ncommitted = [200]\n'
            f'not_committed = [404, 422]\nresult = "/body"\n{_PROBE_TIMES}'
        )
    return "".join(parts)


def kit_probe(verb: str) -> str:
    """A kit destination's verb probing its ledger (``GET /effectus/keys/{key}``): 200 with
    the stored answer, whose body is the result; 404 unknown and 422 a stored refusal (a
    retry under the key replays it), not committed."""
    return (
        f'[verbs."{verb}".probe]\npath = "/effectus/keys/{{key}}"\ncommitted = [200]\n'
        f'not_committed = [404, 422]\nresult = "/answer/body"\n{_PROBE_TIMES}'
    )


def plan(index: int, fail_every: int = 4) -> tuple[str, dict[str, Any]]:
    """Three at_most_once steps; every ``fail_every``th saga's last one is refused (422), so
    the first two are compensated."""
    fail = fail_every > 0 and index % fail_every == 0
    steps = [
        {
            "id": f"s{i}",
            "verb": f"{NAME}.do",
            "args": {"i": i, "fail": fail and i == 3},
            "compensate": {"verb": f"{NAME}.undo", "args": {"i": i}},
        }
        for i in range(1, 4)
    ]
    return f"p-{index}", {"plan_id": "chaos-probes", "steps": steps}


PENDING = """
SELECT count(*) AS n FROM effectus_saga_outbox o
LEFT JOIN effectus_dispatch_probes p ON p.dispatch_id = o.dispatch_id AND p.attempt = o.attempt
WHERE o.state = 'blocked_unknown' AND (p.dispatch_id IS NULL OR p.next_probe_at IS NOT NULL)"""
LIVE = (
    "SELECT count(*) AS n FROM effectus_saga_instances WHERE state IN ('running', 'compensating')"
)


def pending(url: str, rows: Rows) -> int:
    """Blocked dispatches with a probe to come: not yet scheduled, or due again (not given up,
    not moved on)."""
    return int(rows(url, PENDING)[0]["n"])


def drain(
    spawn: Callable[[], subprocess.Popen[bytes]], url: str, rows: Rows, timeout: float
) -> None:
    """After the settling daemon (``run --until-idle`` leaves probes scheduled later): a clean
    daemon runs until no saga is running and no blocked dispatch has a probe to come (the
    answers settled, the retries they allowed sent), then stops; what is still pending at
    ``timeout`` is left to ``check``."""
    if not pending(url, rows):
        return
    proc = spawn()
    try:
        until = time.monotonic() + timeout
        while time.monotonic() < until and proc.poll() is None:
            if not pending(url, rows) and not int(rows(url, LIVE)[0]["n"]):
                return
            time.sleep(0.2)  # polls the state it waits for
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def check(report: Report, url: str, dest_url: str | None, rows: Rows) -> None:
    """No saga left blocked once the probes ran, and probes did settle some; the figures for
    docs/evidence.md. With ``dest_url`` (the lookup service's database): a dispatch that
    succeeded took effect once under its key, one that failed never did."""
    v = report.violations
    events = rows(
        url,
        "SELECT saga_id, kind, to_state, detail FROM effectus_saga_events WHERE actor = 'probe'",
    )
    settled = {"committed": 0, "not_committed": 0}
    sent = 0
    for row in events:
        sent += row["kind"] in ("probe_answered", "probe_given_up")
        detail = json.loads(row["detail"]) if isinstance(row["detail"], str) else row["detail"]
        if row["kind"] == "probe_answered" and row["to_state"] is not None:
            settled[detail["verdict"]] += 1
    scheduled = [row for row in events if row["kind"] == "probe_scheduled"]
    blocked = rows(
        url,
        "SELECT saga_id, state, stop_reason FROM effectus_saga_instances"
        " WHERE state LIKE 'blocked_%'",
    )
    for row in blocked:
        v.append(f"saga {row['saga_id'][:12]} left {row['state']}: {row['stop_reason']}")
    if not settled["committed"] or not settled["not_committed"]:
        v.append(f"probes settled {settled}: the row proves too little")
    if dest_url is not None:
        _check_effects(v, url, dest_url, rows)
    report.details.update(
        blocked_before_probes=len({row["saga_id"] for row in scheduled}),
        dispatches_blocked=len(scheduled),
        blocked_after_probes=len(blocked),
        probes_sent=sent,
        settled_committed=settled["committed"],
        settled_not_committed=settled["not_committed"],
    )


def _check_effects(v: list[str], url: str, dest_url: str, rows: Rows) -> None:
    effects = rows(
        dest_url, f"SELECT idempotency_key, count(*) AS n FROM {TABLE} GROUP BY idempotency_key"
    )
    counts = {row["idempotency_key"]: int(row["n"]) for row in effects}
    dispatches = rows(
        url, "SELECT effect_id, direction, idempotency_key, state FROM effectus_saga_outbox"
    )
    for d in dispatches:
        n = counts.get(d["idempotency_key"], 0)
        if d["state"] == "succeeded" and n != 1:
            v.append(f"{d['effect_id']}/{d['direction']} succeeded with {n} effect(s)")
        if d["state"] == "failed_permanent" and n:
            v.append(f"{d['effect_id']}/{d['direction']} failed yet took effect {n} time(s)")

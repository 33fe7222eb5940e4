"""NOT WIRED YET (issue 30, second new row): at_most_once against a plain destination that
honours deadlines and offers a lookup, with kills at every point; 0 keys executed twice and no
saga left blocked after the probes ran. It needs reconciliation probes (``[verbs."X".probe]``,
``honours_deadline``), which land on another branch; written against the issue's names.

To wire it, once the probe branch is merged:
  1. runner._destinations: for ``scenario.mode == "lookup"`` start
     ``tests.chaos.lookup_destination`` (``--port 0 --database-url DEST --stall-after-commit S
     --reset-after-commit S --clock-skew SKEW``) under the name ``NAME``, instead of
     tests.chaos.destination;
  2. runner._config: ``config_text(ports)`` for that mode; topology.plan: ``plan(index)``;
  3. runner._check: for that mode count executions from ``lookup_effects`` (``TABLE``), treat
     it as at_most_once (no key twice), then call ``check``;
  4. make sure the drive and the settling daemon wait for due probes (``after`` past each
     attempt's deadline), then add ``SCENARIO`` to scenarios.SHORT (LONG takes it three times).
"""

from __future__ import annotations

from typing import Any

from effectusd.faults import POINTS
from tests.chaos.scenarios import Report, Scenario

NAME = "lookup"  # the destination, and its verbs lookup.do / lookup.undo
TABLE = "lookup_effects"  # one row per business effect, in the service's transaction
SKEW = 1.0  # the service's --clock-skew, seconds: the probes wait past it (after)
_RETRY = '{ max_attempts = 30, initial_backoff = "20ms", max_backoff = "300ms" }'

SCENARIO = Scenario(
    "at_most_once, plain destination with deadlines and a lookup, probes",
    delivery="at_most_once",
    mode="lookup",
    daemons=2,
    faults=tuple(sorted(POINTS)),
    external_kills=4,
    stall_after_commit=0.1,
    reset_after_commit=0.1,
    timeout_s=180,
)


def config_text(ports: dict[str, int]) -> str:
    """The daemons' config: the lookup destination declares it honours deadlines, and each
    verb probes ``GET /lookup/{key}`` once its attempt's deadline plus SKEW (and a margin)
    has passed: 200 committed (the stored answer's body is the result); 404 (unknown) and 422
    (a stored refusal, replayed to a retry under the key) not committed."""
    port = ports[NAME]
    parts = [
        '[dispatcher]\nconcurrency = 32\nlease_margin = "1s"\npoll_interval = "100ms"\n'
        'shutdown_grace = "5s"\n',
        f'[destinations.{NAME}]\nbase_url = "http://127.0.0.1:{port}"\ntimeout = "1s"\n'
        'connect_timeout = "500ms"\nmax_concurrency = 16\nhonours_deadline = true\n',
    ]
    for verb in ("do", "undo"):
        delivery = "at_most_once" if verb == "do" else "at_least_once"
        parts.append(
            f'[verbs."{NAME}.{verb}"]\ndestination = "{NAME}"\npath = "/{verb}"\n'
            f'delivery = "{delivery}"\nretry = {_RETRY}\n'
            f'[verbs."{NAME}.{verb}".probe]\npath = "/lookup/{{key}}"\ncommitted = [200]\n'
            f'not_committed = [404, 422]\nresult = "/body"\nafter = "{SKEW + 1:g}s"\n'
            'every = "500ms"\nmax_probes = 20\n'
        )
    return "".join(parts)


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


def check(report: Report, url: str, dest_url: str, rows: Any) -> None:
    """No key executed twice; no saga left blocked once the probes ran; probes did run."""
    v = report.violations
    executed = rows(
        dest_url,
        f"SELECT idempotency_key, count(*) AS n FROM {TABLE} GROUP BY idempotency_key",
    )
    twice = sum(1 for row in executed if row["n"] > 1)
    if twice:
        v.append(f"{twice} key(s) executed more than once")
    blocked = rows(
        url,
        "SELECT saga_id, state, stop_reason FROM effectus_saga_instances"
        " WHERE state LIKE 'blocked_%'",
    )
    for row in blocked:
        v.append(f"saga {row['saga_id'][:12]} left {row['state']}: {row['stop_reason']}")
    probed = rows(url, "SELECT count(*) AS n FROM effectus_saga_events WHERE actor = 'probe'")
    if not int(probed[0]["n"]):
        v.append("no probe settled anything: the row proves nothing")
    report.details["keys_executed_twice"] = twice
    report.details["settled_by_probe"] = int(probed[0]["n"])

"""The failover runner: sagas with a fenced step and an at_most_once step drain through a daemon
that knows its database by a two-host URL; mid-drain the primary dies and the standby is
promoted. Then the chaos suite's invariants (tests/chaos/runner.py), and failover's own:

- the destination saw the fencing tokens of each resource strictly increase (a token granted
  on the old primary and lost with it must not be granted again to another holder);
- the daemon serves again (``/readyz``: ready, on the new timeline) without a restart;
- ``Client.wait`` on a saga across the failover returns its end, not a connection error;
- synchronous replication: no at_most_once request reached the destination twice;
  asynchronous: the daemon said, at start, that one may (its log and ``/readyz``).

    python -m tests.failover.runner     # the long run (make chaos): prints the table rows
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from effectusd.core.replication import ASYNCHRONOUS_WARNING
from tests.chaos import runner as chaos
from tests.chaos.scenarios import Report, Scenario
from tests.failover import cluster

SHORT = [
    Scenario("failover, synchronous replication", sagas=40, failover="synchronous"),
    Scenario("failover, asynchronous replication", sagas=40, failover="asynchronous"),
]
LONG = [
    Scenario("failover, synchronous replication", sagas=400, failover="synchronous"),
    Scenario("failover, asynchronous replication", sagas=400, failover="asynchronous"),
]
BOUND_S = 60.0  # what any one wait below may take before it counts as a failure
FAIL_OVER_AT = 0.7  # share of the sagas still running when the primary dies


@dataclass
class FailoverReport(Report):
    fence_violations: int = 0
    at_most_once_resent: int = 0  # at_most_once requests the destination received again
    lost_commits: int = 0  # what the old primary committed while its standby got nothing
    warned: bool = False  # the asynchronous-replication warning, in the log and /readyz
    mode_before: str = ""
    running_at_failover: int = 0  # sagas not yet ended when the primary died
    ready_after_s: float | None = None  # from the promotion to /readyz ready on the new timeline
    wait_result: str = ""


def run_failover(scenario: Scenario) -> FailoverReport:
    report = FailoverReport(scenario.name, sagas=scenario.sagas)
    synchronous = scenario.failover == "synchronous"
    started = time.monotonic()
    with (
        cluster.pair(synchronous) as pair,
        chaos._database("effectusd_failover_dest") as dest_url,
        tempfile.TemporaryDirectory(prefix="effectusd-failover-") as scratch,
    ):
        pair.create_database("effectusd")
        url = pair.url("effectusd")
        chaos._migrate(url)
        served: dict[str, int] = {}
        with chaos._destinations(scenario, dest_url, served, 0) as ports:
            config = chaos._config(Path(scratch) / "effectusd.toml", ports, scenario)
            chaos._submit(config, url, scenario)
            log_path = Path(scratch) / "daemon.log"
            with log_path.open("wb") as log:
                daemons = chaos.Daemons(scenario, config, url, random.Random(0))
                daemon = daemons.spawn(None, "--http-port", "0", log=log)
                daemons.procs = [daemon]
                try:
                    _fail_over_mid_drain(report, scenario, pair, url, config, log_path)
                finally:
                    daemons.stop()
            text = log_path.read_text(errors="replace")
            warned = ASYNCHRONOUS_WARNING in text
            report.warned = report.warned and warned
            if synchronous and warned:
                report.violations.append("warned of asynchronous replication on a synchronous one")
            if not synchronous and not report.warned:
                report.violations.append("no asynchronous-replication warning (log and /readyz)")
            chaos.settle(config, url)
            chaos._check(report, scenario, url, dest_url)
        _check_fencing(report, dest_url)
        _check_at_most_once(report, dest_url, strict=synchronous)
    report.seconds = round(time.monotonic() - started, 1)
    return report


def _fail_over_mid_drain(
    report: FailoverReport,
    scenario: Scenario,
    pair: cluster.Pair,
    url: str,
    config: Path,
    log_path: Path,
) -> None:
    port = _bound(lambda: _served_port(log_path), "the daemon's HTTP port in its log")
    before = _bound(lambda: _ready(port), "the daemon ready before the failover")
    report.mode_before = before["replication"]["mode"]
    report.warned = before["replication"].get("warning") == ASYNCHRONOUS_WARNING
    if report.mode_before != scenario.failover:
        report.violations.append(f"/readyz said {report.mode_before}, not {scenario.failover}")
    saga_id = _last_saga(url)
    waited: dict[str, Any] = {}
    waiter = threading.Thread(target=_wait_for, args=(config, url, saga_id, waited), daemon=True)
    waiter.start()

    threshold = scenario.sagas * FAIL_OVER_AT
    _bound(lambda: chaos._outstanding(url) <= threshold or None, "the drain to begin")
    if scenario.failover == "asynchronous":
        # What the old primary commits from now on never reaches the standby: at least a few
        # sagas' worth of grants and write-aheads, lost with it.
        base = _committed(pair)
        pair.stall_replication()
        _bound(lambda: _committed(pair) >= base + 12 or None, "commits the standby never gets")
        report.lost_commits = _committed(pair) - base
    report.running_at_failover = chaos._outstanding(url)
    if report.running_at_failover == 0:
        report.violations.append("every saga had ended before the failover: nothing was tested")
    pair.fail_over()
    promoted = time.monotonic()
    after = _bound(lambda: _ready(port, timeline=2), "the daemon ready on the new primary")
    report.ready_after_s = round(time.monotonic() - promoted, 1)
    if after["replication"]["previous_timeline"] != 1:
        report.violations.append("/readyz does not say the timeline changed")
    _bound(lambda: chaos._outstanding(url) == 0 or None, "the sagas to drain", scenario.timeout_s)
    waiter.join(BOUND_S)
    report.wait_result = str(waited.get("state") or waited.get("error") or "still waiting")
    if "state" not in waited:
        report.violations.append(f"Client.wait across the failover: {report.wait_result}")


def _bound(probe: Any, what: str, seconds: float = BOUND_S) -> Any:
    """``probe()``'s first result that is not None, looked at every 50 ms; fails after
    ``seconds`` (a bound on a wait, not a timing assertion)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            result = probe()
        except (OSError, psycopg.Error, ValueError):
            result = None
        if result is not None and result is not False:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds:.0f}s: {what}")
        time.sleep(0.05)


def _served_port(log_path: Path) -> int | None:
    for line in log_path.read_text(errors="replace").splitlines():
        if "serving /healthz and /readyz on port" in line:
            return int(line.rsplit(" ", 1)[1])
    return None


def _ready(port: int, timeline: int | None = None) -> dict[str, Any] | None:
    """The /readyz body once ready (and on ``timeline``, if given)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
        body: dict[str, Any] = json.loads(answer.read())
    if timeline is not None and body.get("replication", {}).get("timeline") != timeline:
        return None
    return body


def _last_saga(url: str) -> str:
    [row] = chaos._rows(
        url, "SELECT saga_id FROM effectus_saga_instances ORDER BY created_at DESC LIMIT 1"
    )
    return str(row["saga_id"])


def _wait_for(config: Path, url: str, saga_id: str, waited: dict[str, Any]) -> None:
    from effectusd.client import Client
    from effectusd.config import load_config

    try:
        view = Client(load_config(config), database_url=url).wait(saga_id, timeout=BOUND_S * 3)
        waited["state"] = view.state.value
    except Exception as exc:  # noqa: BLE001 (whatever it is, the report names it)
        waited["error"] = type(exc).__name__


def _committed(pair: cluster.Pair) -> int:
    """Attempts the primary holds: each one a claim's or a write-ahead's commit."""
    with psycopg.connect(pair.admin_url(pair.primary_port, "effectusd"), connect_timeout=2) as c:
        row = c.execute("SELECT count(*) FROM effectus_saga_attempts").fetchone()
    assert row is not None
    return int(row[0])


def _check_fencing(report: FailoverReport, dest_url: str) -> None:
    """Per resource, in the order the destination committed them, tokens strictly increase:
    never one token for two holders, never a lower one accepted."""
    rows = chaos._rows(
        dest_url, "SELECT resource, token, idempotency_key FROM chaos_fence_log ORDER BY id"
    )
    if not rows:
        report.violations.append("no fenced mutation reached the destination: nothing checked")
    last: dict[str, int] = {}
    for row in rows:
        previous = last.get(row["resource"])
        if previous is not None and row["token"] <= previous:
            report.fence_violations += 1
            report.violations.append(
                f"{row['resource']}: token {row['token']} accepted after {previous}"
            )
        last[row["resource"]] = row["token"]


def _check_at_most_once(report: FailoverReport, dest_url: str, *, strict: bool) -> None:
    rows = chaos._rows(
        dest_url,
        "SELECT idempotency_key, count(*) AS n FROM chaos_received"
        " WHERE effect_id = 'once' AND direction = 'forward' GROUP BY idempotency_key",
    )
    report.at_most_once_resent = sum(int(row["n"]) - 1 for row in rows)
    if strict and report.at_most_once_resent:
        report.violations.append(
            f"synchronous replication, yet {report.at_most_once_resent} at_most_once "
            "request(s) sent again"
        )


def format_rows(reports: list[FailoverReport]) -> str:
    head = (
        "| scenario | sagas | duplicates | fencing violations | at_most_once sent again | "
        "commits lost | blocked | warned | ready again | ok |\n" + "|---" * 10 + "|"
    )
    rows = [
        f"| {r.scenario} | {r.sagas} | {r.duplicates} | {r.fence_violations} | "
        f"{r.at_most_once_resent} | {r.lost_commits} | "
        f"{', '.join(f'{k} {n}' for k, n in sorted(r.blocked.items())) or '-'} | "
        f"{'yes' if r.warned else 'no'} | {r.ready_after_s}s | "
        f"{'yes' if not r.violations else 'NO'} |"
        for r in reports
    ]
    return "\n".join([head, *rows])


if __name__ == "__main__":
    if (why := cluster.available()) is not None:
        sys.exit(f"cannot build a cluster here: {why}")
    chosen = SHORT if "--short" in sys.argv else LONG
    results = []
    for scenario in chosen:
        result = run_failover(scenario)
        results.append(result)
        print(json.dumps({**result.__dict__}), file=sys.stderr, flush=True)
    print(format_rows(results))
    sys.exit(1 if any(r.violations for r in results) else 0)

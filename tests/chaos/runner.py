"""The chaos runner: real daemon processes killed at every pipeline step, racing each other,
a database restart, destinations that commit then stall or reset, a paused daemon; then
invariants checked over the whole history, from the destination's rows and ours.

    python -m tests.chaos.runner            # the long run: prints the table for docs/evidence.md
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import psycopg
from psycopg.rows import dict_row

from tests.chaos import fan_out, probes, retention, topology
from tests.chaos.hostile import BEHAVIOURS
from tests.chaos.scenarios import LONG, SHORT, Report, Scenario, format_table
from tests.support import backends

ADMIN_URL = os.environ.get(
    "EFFECTUSD_TEST_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
ROOT = Path(__file__).resolve().parents[2]
LIVE = ("running", "compensating")


@contextmanager
def _database(prefix: str) -> Iterator[str]:
    name = f"{prefix}_{os.getpid()}_{random.randrange(1 << 30):x}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    try:
        yield url
    finally:
        _wait_for_postgres()
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def _store(scenario: Scenario) -> Iterator[str]:
    """The daemons' database, migrated: a PostgreSQL database or a SQLite file."""
    if scenario.store == "sqlite":
        folder = Path(f"/tmp/effectusd-chaos-{os.getpid()}-{random.randrange(1 << 30):x}")
        folder.mkdir()
        url = f"sqlite:///{folder / 'effectusd.db'}"
        try:
            _migrate(url)
            yield url
        finally:
            for file in folder.iterdir():
                file.unlink()
            folder.rmdir()
        return
    with _database("effectusd_chaos") as url:
        _migrate(url)
        yield url


def _migrate(url: str) -> None:
    with backends.connection(url, create=True) as conn:
        backends.migrate(conn)


def _wait_for_postgres(timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg.connect(ADMIN_URL, connect_timeout=2):
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _config(path: Path, ports: dict[str, int], scenario: Scenario) -> Path:
    path.write_text(topology.config_text(ports, scenario))
    return path


class Daemons:
    """Keeps `effectusd run` processes alive, each set to die at a random fault point."""

    def __init__(
        self, scenario: Scenario, config: Path, url: str | None, rng: random.Random
    ) -> None:
        """``url``: the store's, or None for the config's stores (tests/chaos/stores.py)."""
        self.scenario, self.config, self.url, self.rng = scenario, config, url, rng
        self.procs: list[subprocess.Popen[bytes]] = []
        self.kills = 0
        self.restarts = 0

    def spawn(
        self, fault: str | None, *extra: str, log: IO[bytes] | None = None
    ) -> subprocess.Popen[bytes]:
        """A daemon dying at ``fault`` (None: never), run with ``extra`` arguments; its log
        (at INFO) goes to ``log`` if given."""
        env = {**os.environ, topology.TOKEN_ENV: topology.TOKEN}
        env.pop("EFFECTUSD_FAULT", None)
        if fault:
            env["EFFECTUSD_FAULT"] = fault
            env["EFFECTUSD_FAULT_AFTER"] = str(self.rng.randrange(0, 6))
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "effectusd.cli",
                "--config",
                str(self.config),
                *(("--database-url", self.url) if self.url else ()),
                "run",
                "--log-level",
                "WARNING" if log is None else "INFO",
                *extra,
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL if log is None else log,
        )

    def _fault(self) -> str | None:
        return self.rng.choice(self.scenario.faults) if self.scenario.faults else None

    def start(self) -> None:
        self.procs = [self.spawn(self._fault()) for _ in range(self.scenario.daemons)]

    def tend(self) -> None:
        for index, proc in enumerate(self.procs):
            if proc.poll() is not None:
                self.kills += proc.returncode == -signal.SIGKILL
                self.restarts += 1
                # fewer faults as the run goes on, so it finishes
                fault = self._fault() if self.restarts < 40 * max(1, len(self.procs)) else None
                self.procs[index] = self.spawn(fault)

    def kill_one(self) -> None:
        victim = self.rng.choice(self.procs)
        if victim.poll() is None:
            victim.kill()

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _outstanding(url: str) -> int:
    [row] = _rows(
        url,
        "SELECT count(*) AS n FROM effectus_saga_instances"
        " WHERE state IN ('running', 'compensating')",
    )
    return int(row["n"])


@contextmanager
def _destinations(
    scenario: Scenario, dest_url: str, served: dict[str, int], seed: int
) -> Iterator[dict[str, int]]:
    """The scenario's destination processes, started one by one (the kit installs itself):
    the name each has in the config, and its port. Once they stopped, ``served`` holds the
    hostile answers given per behaviour."""
    ports: dict[str, int] = {}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for name in topology.healthy_names(scenario):
            if scenario.mode == "lookup":
                [ports[name]] = _start(procs, *probes.service(scenario, dest_url))
                continue
            [ports[name]] = _start(
                procs,
                "tests.chaos.destination",
                *("--port", "0", "--database-url", dest_url),
                *("--mode", scenario.mode),
                *("--stall-after-commit", str(scenario.stall_after_commit)),
                *("--reset-after-commit", str(scenario.reset_after_commit)),
                *(("--log-received",) if scenario.failover else ()),
                *(_kit_retention(scenario) if scenario.retention else ()),
            )
        if scenario.hostile:
            assert set(scenario.hostile) <= set(BEHAVIOURS), scenario.hostile
            listening = _start(
                procs,
                "tests.chaos.hostile",
                *(arg for behaviour in scenario.hostile for arg in ("--listen", f"{behaviour}:0")),
                *("--max-requests", str(scenario.sagas * 20)),
                *("--lifetime", str(scenario.timeout_s + 300)),
                *("--seed", str(seed)),
            )
            names = topology.hostile_names(scenario)
            ports.update(zip(names, listening, strict=True))
        yield ports
    finally:
        for proc in procs:
            proc.terminate()
        outputs = [proc.communicate(timeout=10)[0] for proc in procs]
        if scenario.hostile and outputs[-1].strip():
            served.update(json.loads(outputs[-1].strip().splitlines()[-1]))


def _kit_retention(scenario: Scenario) -> tuple[str, ...]:
    withhold = ("--withhold-issued-at",) if scenario.withhold_issued_at else ()
    clock_skew = ("--clock-skew", str(retention.SKEW))
    return ("--retention", str(scenario.retention), *clock_skew, *withhold)


def run_scenario(scenario: Scenario, seed: int = 0) -> Report:
    rng = random.Random(seed or hash(scenario.name))
    if scenario.stores > 1:
        from tests.chaos import stores

        return stores.run(scenario, rng)
    report = Report(scenario.name, sagas=scenario.sagas)
    started = time.monotonic()
    with _store(scenario) as url, _database("effectusd_chaos_dest") as dest_url:
        served: dict[str, int] = {}
        with _destinations(scenario, dest_url, served, rng.randrange(1 << 30)) as ports:
            config = _config(Path(f"/tmp/effectusd-chaos-{os.getpid()}.toml"), ports, scenario)
            _submit(config, url, scenario)
            daemons = Daemons(scenario, config, url, rng)
            daemons.start()
            operator = None
            if scenario.retention:  # the ledger pruned and blocked sagas retried as it runs
                operator = retention.Operator(scenario, config, url, dest_url, _rows)
            _drive(scenario, daemons, url, rng, started, operator)
            daemons.stop()
            settle(config, url)
            if scenario.probes:  # --until-idle leaves probes scheduled later
                probes.drain(lambda: daemons.spawn(None), url, _rows, scenario.timeout_s)
            report.kills, report.restarts = daemons.kills, daemons.restarts
            _check(report, scenario, url, dest_url)
            if operator is not None:
                operator.check(report)
        if scenario.hostile:
            topology.check_hostile(report.violations, scenario, url, _rows, served)
    report.seconds = round(time.monotonic() - started, 1)
    return report


def _start(procs: list[subprocess.Popen[bytes]], module: str, *args: str) -> list[int]:
    """Start ``module`` (appended to ``procs``, to be stopped) and wait for its ready line,
    which names the ports it listens on: it binds port 0, so no other process can take a port
    between choosing and binding it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    procs.append(proc)
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    assert line[:1] == [b"ready"], module
    return [int(port) for port in line[1:]]


def _submit(config: Path, url: str, scenario: Scenario) -> None:
    from effectusd.client import Client, Submission
    from effectusd.config import load_config

    client = Client(load_config(config), database_url=url)
    client.submit_many(
        Submission(plan, execution_id=execution_id)
        for execution_id, plan in (topology.plan(scenario, i) for i in range(scenario.sagas))
    )


def _drive(
    scenario: Scenario,
    daemons: Daemons,
    url: str,
    rng: random.Random,
    started: float,
    operator: retention.Operator | None = None,
) -> None:
    kills_left = scenario.external_kills
    restarted = not scenario.restart_postgres
    paused = not scenario.pause_daemon
    while time.monotonic() - started < scenario.timeout_s:
        daemons.tend()
        try:
            outstanding = _outstanding(url)
        except backends.UNAVAILABLE:
            _wait_for_postgres()
            continue
        busy = operator.tick() if operator is not None else False
        busy = busy or (scenario.probes and probes.pending(url, _rows) > 0)
        if outstanding == 0 and not busy:
            return
        if kills_left and rng.random() < 0.3:
            daemons.kill_one()
            kills_left -= 1
        if not restarted and outstanding < scenario.sagas * 0.8:
            restarted = True
            subprocess.run(
                [
                    "pg_ctlcluster",
                    "--skip-systemctl-redirect",
                    _pg_version(),
                    "main",
                    "restart",
                    "-m",
                    "fast",
                ],
                check=True,
                capture_output=True,
            )
            _wait_for_postgres()
        if not paused and outstanding < scenario.sagas * 0.9:
            paused = True
            victim = daemons.procs[0]
            victim.send_signal(signal.SIGSTOP)
            time.sleep(3.5)  # the fault itself: a stall longer than the 2 s leases
            victim.send_signal(signal.SIGCONT)
        time.sleep(0.2)


def _pg_version() -> str:
    return sorted(os.listdir("/etc/postgresql"))[-1]


def settle(config: Path, url: str | None) -> None:
    """A last clean daemon settles what the dead ones left (expired leases): of ``url``, or of
    every store of the configuration (None)."""
    database = ["--database-url", url] if url is not None else []
    subprocess.run(
        [
            sys.executable,
            "-m",
            "effectusd.cli",
            "--config",
            str(config),
            *database,
            "run",
            "--until-idle",
            "--log-level",
            "WARNING",
        ],
        check=True,
        timeout=180,
        env={**os.environ, topology.TOKEN_ENV: topology.TOKEN},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _rows(url: str, query: str) -> list[dict[str, Any]]:
    """Rows of plain SQL that both stores understand."""
    if backends.is_sqlite(url):
        with backends.connection(url) as conn:
            cursor = conn.execute(query)  # type: ignore[arg-type]
            columns = [column[0] for column in cursor.description]
            return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
    with psycopg.connect(url, row_factory=dict_row) as pg:
        return pg.execute(query).fetchall()  # type: ignore[arg-type]


def _check(report: Report, scenario: Scenario, url: str, dest_url: str) -> None:
    v = report.violations
    sagas = _rows(url, "SELECT saga_id, state, stop_reason FROM effectus_saga_instances")
    for row in sagas:
        report.states[row["state"]] = report.states.get(row["state"], 0) + 1
        if row["state"] in LIVE:
            v.append(f"saga {row['saga_id'][:12]} still {row['state']} with nothing due")
        if row["state"].startswith("blocked_") and not row["stop_reason"]:
            v.append(f"saga {row['saga_id'][:12]} blocked without a reason")
    report.lost = sum(1 for row in sagas if row["state"] in LIVE)

    dispatches = _rows(
        url,
        "SELECT dispatch_id, saga_id, effect_id, direction, idempotency_key, state, attempt,"
        " destination FROM effectus_saga_outbox",
    )
    healthy = set(topology.healthy_names(scenario))
    attempts = _rows(
        url,
        "SELECT dispatch_id, attempt, outcome, sent_at, completed_at FROM effectus_saga_attempts",
    )
    by_dispatch: dict[int, list[dict[str, Any]]] = {}
    for row in attempts:
        by_dispatch.setdefault(row["dispatch_id"], []).append(row)
    for d in dispatches:
        numbers = sorted(a["attempt"] for a in by_dispatch.get(d["dispatch_id"], []))
        if numbers != list(range(1, d["attempt"] + 1)):
            v.append(f"dispatch {d['dispatch_id']} attempts not contiguous: {numbers}")

    if scenario.delivery == "at_most_once":
        _blocked_by_deaths(report, url)

    table = {"kit": "chaos_mutations", "lookup": probes.TABLE}.get(scenario.mode, "chaos_received")
    received = _rows(
        dest_url, f"SELECT idempotency_key, count(*) AS n FROM {table} GROUP BY idempotency_key"
    )
    counts = {row["idempotency_key"]: row["n"] for row in received}
    report.duplicates = sum(n - 1 for n in counts.values() if n > 1)
    if scenario.mode == "kit" and not scenario.expect_duplicates:
        for d in dispatches:
            if d["destination"] not in healthy:
                continue  # hostile destinations keep no rows: topology.check_hostile
            n = counts.get(d["idempotency_key"], 0)
            if d["state"] == "succeeded" and n != 1:
                v.append(f"{d['effect_id']}/{d['direction']} succeeded with {n} mutations")
                report.lost += n == 0
            if d["state"] == "failed_permanent" and n:
                v.append(f"{d['effect_id']}/{d['direction']} failed yet mutated {n} time(s)")
        if report.duplicates:
            v.append(f"{report.duplicates} duplicate mutation(s) through the kit")
    elif scenario.delivery == "at_most_once" and report.duplicates:
        v.append(f"at_most_once: {report.duplicates} key(s) received more than once")
    if scenario.expect_duplicates and not report.duplicates:
        v.append("the control showed no duplicates: the suite could not have failed")

    if scenario.probes:
        probes.check(report, url, dest_url if scenario.mode == "lookup" else None, _rows)
    if scenario.fan_out:  # plan order is not success order: checked against the graph
        fan_out.check(v, url, _rows)
        return
    order = _rows(
        url,
        """
        SELECT o.saga_id, o.effect_id, a.completed_at FROM effectus_saga_outbox o
        JOIN effectus_saga_attempts a ON a.dispatch_id = o.dispatch_id AND a.attempt = o.attempt
        WHERE o.direction = 'compensation' AND o.state = 'succeeded'
        ORDER BY o.saga_id, a.completed_at""",
    )
    sequences = _plan_sequences(url)  # a step's place is its pinned plan's
    last: dict[str, int] = {}
    for row in order:
        previous = last.get(row["saga_id"])
        sequence = sequences[row["saga_id"]][row["effect_id"]]
        if previous is not None and sequence >= previous:
            v.append(f"saga {row['saga_id'][:12]} compensated out of reverse order")
        last[row["saga_id"]] = sequence


def _blocked_by_deaths(report: Report, url: str) -> None:
    """The at_most_once sagas a daemon's death blocked: those whose blocking attempt was
    settled by a reclaim (its daemon gone, the call sent), not by an answer (a stall or reset
    the destination made). Read per death (every daemon that exited, killed or at a fault
    point), the figure to compare between runs at equal kills. It is reported, not bounded:
    a death leaves uncertain every call in flight and every answer not yet recorded (the
    recorder's queue and the batch it is writing), and how many those were depends on where
    the death fell, not on the engine."""
    rows = _rows(
        url,
        """
        SELECT count(DISTINCT o.saga_id) AS n FROM effectus_saga_outbox o
        JOIN effectus_saga_attempts a
          ON a.dispatch_id = o.dispatch_id AND a.attempt = o.uncertain_attempt
        WHERE o.state = 'blocked_unknown' AND a.settled_by = 'reclaim'""",
    )
    by_deaths = int(rows[0]["n"])
    report.details["blocked_by_deaths"] = by_deaths
    report.details["blocked_per_death"] = round(by_deaths / max(report.restarts, 1), 2)


def _plan_sequences(url: str) -> dict[str, dict[str, int]]:
    """Each saga's steps' sequences, by effect id, as its pinned plan lists them."""
    found = {}
    for row in _rows(url, "SELECT saga_id, plan FROM effectus_saga_instances"):
        plan = json.loads(row["plan"]) if isinstance(row["plan"], str) else row["plan"]
        found[row["saga_id"]] = {step["id"]: step["sequence"] for step in plan["steps"]}
    return found


if __name__ == "__main__":
    chosen = SHORT if "--short" in sys.argv else LONG
    results = []
    for scenario in chosen:
        result = run_scenario(scenario)
        results.append(result)
        print(json.dumps({**result.__dict__}), file=sys.stderr, flush=True)
    print(format_table(results))
    sys.exit(1 if any(r.violations for r in results) else 0)

"""`make bench-peers`: effectusd beside the fastest PostgreSQL queue we know, on the same work.

One run, one machine, one no-op HTTP sink: pgqueuer (asyncpg) drains a backlog of jobs whose
handler POSTs the same JSON body to the sink through aiohttp, and ``effectusd bench`` drains a
backlog of sagas whose steps POST to the same sink, through the destination's default transport
(``--transport aiohttp`` measures effectusd on pgqueuer's HTTP client). Both at the same
concurrency, both from a backlog submitted before the clock starts. What is printed is a ratio
measured in one run: absolute rates on a shared 2-core machine move by a factor of two from one
run to the next, ratios much less. pgqueuer runs before and after effectusd and the two rates
are averaged, so a drift of the machine during the run counts against neither side.

A second peer, DBOS Transact (``effectusd.bench.dbos_peer``), drains durable five-step
workflows whose steps make the same POST, once, between pgqueuer's first run and effectusd's:
the nearest thing to a saga's steps among the libraries we know (``--skip-dbos`` leaves it out).

pgqueuer's jobs are all enqueued before its clock starts, where a saga's next step is enqueued
by the step before it, inside effectusd's drain. So pgqueuer also drains chains of as many
jobs as the longest plan has steps, once, after its first run: only each chain's first job is
in the backlog, and each job's handler, its POST answered, enqueues the next link through
pgqueuer's own queries over a pool of its own (``CHAIN_ENQUEUE_CONNECTIONS``), the fastest way
a user would chain jobs: never queued behind the dequeue on the manager's one connection, so
the chains' rate, and effectusd's ratio to it, is not flattered. It keeps no saga state and
writes nothing ahead; it is the bare job that also pays for the next one's enqueue.

The peers need the ``peers`` extra (``pip install -e '.[peers]'``): pgqueuer, asyncpg, dbos.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

from effectusd.backends.postgres import connection_keywords, database_name
from effectusd.bench import BenchResult, run_bench
from effectusd.bench.database import drop_database, scalar, scratch_database, settled_scalar
from effectusd.bench.harness import BODY, Sink, sink_cpu_used, start_sink
from effectusd.bench.measures import DatabaseCpu, PeerResult
from effectusd.config import DestinationConfig
from effectusd.executors.factory import EXECUTOR_CLASSES

DEFAULT_TRANSPORT: str = DestinationConfig.model_fields["transport"].default

ENQUEUE_BATCH = 1_000
# The chains enqueue each next job through a pool of this many connections of their own.
CHAIN_ENQUEUE_CONNECTIONS = 4


def _link(left: int) -> str:
    """The entrypoint of a chain's job with ``left`` jobs to go, itself included."""
    return f"post{left}"


async def _drain_pgqueuer(
    url: str, sink: Sink, jobs: int, concurrency: int, chain: int = 1
) -> PeerResult:
    """``chain`` > 1: the backlog holds ``jobs / chain`` first jobs, and each job enqueues the
    next of its chain once its POST is answered, through a pool of its own (opened before the
    clock starts)."""
    import aiohttp
    import asyncpg
    from pgqueuer import AsyncpgDriver, AsyncpgPoolDriver, Job, Queries, QueueManager
    from pgqueuer.domain.types import QueueExecutionMode

    if jobs % chain:
        raise ValueError(f"{jobs} job(s) do not make chains of {chain}")
    heads = jobs // chain
    setup = await asyncpg.connect(**connection_keywords(url))
    try:
        queries = Queries(AsyncpgDriver(setup))
        await queries.install()
        for start in range(0, heads, ENQUEUE_BATCH):
            size = min(ENQUEUE_BATCH, heads - start)
            await queries.enqueue([_link(chain)] * size, [BODY] * size, [0] * size)
    finally:
        await setup.close()

    rows_before = settled_scalar(url, "rows_written")  # the enqueue's session has reported
    wal_before = scalar(url, "wal_position")
    connection = await asyncpg.connect(**connection_keywords(url))
    size = CHAIN_ENQUEUE_CONNECTIONS
    pool = None
    if chain > 1:
        pool = await asyncpg.create_pool(**connection_keywords(url), min_size=size, max_size=size)
        chained = Queries(AsyncpgPoolDriver(pool))
    connector = aiohttp.TCPConnector(limit=concurrency)
    called = 0
    async with aiohttp.ClientSession(connector=connector) as session:
        manager = QueueManager(Queries(AsyncpgDriver(connection)))

        def link(left: int) -> Callable[[Job], Awaitable[None]]:
            async def post(job: Job) -> None:
                nonlocal called
                async with session.post(
                    f"{sink.url}/noop",
                    data=job.payload,
                    headers={"Content-Type": "application/json"},
                ) as reply:
                    await reply.read()
                    reply.raise_for_status()
                called += 1
                if left > 1:
                    await chained.enqueue(_link(left - 1), job.payload)

            return post

        for left in range(1, chain + 1):
            manager.entrypoint(_link(left))(link(left))
        sink_before = sink.cpu_seconds()
        with DatabaseCpu(database_name(url)) as database_cpu:
            started, cpu_started = time.perf_counter(), time.process_time()
            # pgqueuer wants its task cap at least twice the batch it dequeues at once.
            await manager.run(
                batch_size=max(1, concurrency // 2),
                max_concurrent_tasks=max(2, concurrency),
                mode=QueueExecutionMode.drain,
                dequeue_timeout=timedelta(seconds=1),
            )
            seconds = time.perf_counter() - started
            cpu_s = time.process_time() - cpu_started
        sink_cpu_s = sink_cpu_used(sink, sink_before)
    await connection.close()
    if pool is not None:
        await pool.close()
    wal_bytes = scalar(url, "wal_position") - wal_before
    rows_written = settled_scalar(url, "rows_written") - rows_before
    if called != jobs:
        raise RuntimeError(f"pgqueuer drained {called} of {jobs} job(s): the run is not comparable")
    return PeerResult.of(
        jobs, concurrency, seconds, cpu_s, database_cpu.seconds, wal_bytes, rows_written, sink_cpu_s
    )


def run_pgqueuer(
    server_url: str, sink: Sink, jobs: int, concurrency: int, chain: int = 1
) -> PeerResult:
    """pgqueuer with an aiohttp POST per job, from a backlog of ``jobs`` (or of the first
    jobs of chains of ``chain``), in a scratch database (dropped afterwards)."""
    url = scratch_database(server_url)
    try:
        return asyncio.run(_drain_pgqueuer(url, sink, jobs, concurrency, chain))
    finally:
        drop_database(server_url, url)


@dataclass
class Comparison:
    concurrency: int
    pgqueuer_jobs_per_s: float  # the mean of the run before and the run after effectusd
    pgqueuer_runs: list[float]
    pgqueuer_cpu_us_per_job: float
    pgqueuer_db_cpu_us_per_job: float | None
    pgqueuer_wal_bytes_per_job: float
    pgqueuer_rows_written_per_job: float
    effectusd: dict[int, BenchResult]  # steps per saga → result
    dbos: PeerResult | None = None  # five-step workflows, per step; None with --skip-dbos
    chains: PeerResult | None = None  # pgqueuer's chains of ``chain`` jobs, per job
    chain: int = 1  # the jobs in a chain: the longest plan's steps
    transport: str = DEFAULT_TRANSPORT  # effectusd's HTTP transport (the peers use aiohttp)
    delivery: str = "at_most_once"  # the delivery of effectusd's bench verb
    # the sink's CPU per pgqueuer job (the mean of both runs): what answering a job cost
    pgqueuer_sink_cpu_us_per_job: float | None = None

    def ratio(self, steps: int) -> float:
        return round(self.effectusd[steps].steps_per_s / self.pgqueuer_jobs_per_s, 2)

    def dbos_ratio(self, steps: int) -> float | None:
        """effectusd's steps/s over DBOS's."""
        if self.dbos is None:
            return None
        return round(self.effectusd[steps].steps_per_s / self.dbos.units_per_s, 2)

    def chain_ratio(self, steps: int) -> float | None:
        """effectusd's steps/s over pgqueuer's chained jobs', for plans as long as a chain."""
        if self.chains is None or steps != self.chain:
            return None
        return round(self.effectusd[steps].steps_per_s / self.chains.units_per_s, 2)

    @property
    def pgqueuer_efficiency(self) -> float:
        """pgqueuer's rate over the bare client loop's (the mean of those measured beside
        effectusd's runs): the efficiency effectusd reports, for the peer."""
        bare = statistics.mean(result.bare_calls_per_s for result in self.effectusd.values())
        return round(self.pgqueuer_jobs_per_s / bare, 3)

    def table(self) -> str:
        runs = " / ".join(f"{rate:.0f}" for rate in self.pgqueuer_runs)
        lines = [
            f"concurrency {self.concurrency}, one no-op HTTP sink; the peers POST through "
            f"aiohttp, effectusd through its {self.transport} transport, its steps "
            f"{self.delivery}",
            "per unit (a job, a step): CPU of the queue's process and of its database's "
            "backends, WAL bytes, row versions written, CPU of the sink answering it; "
            "ratio: rate over pgqueuer's",
            f"{'what':<34}{'rate/s':>10}{'ratio':>8}{'CPU µs':>9}{'DB µs':>8}{'WAL B':>8}"
            f"{'rows':>6}{'sink µs':>9}  notes",
            _row(
                "pgqueuer + aiohttp POST per job",
                self.pgqueuer_jobs_per_s,
                1.0,
                self.pgqueuer_cpu_us_per_job,
                self.pgqueuer_db_cpu_us_per_job,
                self.pgqueuer_wal_bytes_per_job,
                self.pgqueuer_rows_written_per_job,
                self.pgqueuer_sink_cpu_us_per_job,
                f"runs {runs}, efficiency {self.pgqueuer_efficiency}",
            ),
        ]
        peers = (
            (self.dbos, "DBOS, 5-step workflows (a step)", "steps, one run"),
            (
                self.chains,
                f"pgqueuer, {self.chain}-job chains",
                "jobs, one run; each job enqueues the next of its chain",
            ),
        )
        for peer, label, note in peers:
            if peer is not None:
                lines.append(
                    _row(
                        label,
                        peer.units_per_s,
                        peer.units_per_s / self.pgqueuer_jobs_per_s,
                        peer.cpu_us_per_unit,
                        peer.db_cpu_us_per_unit,
                        peer.wal_bytes_per_unit,
                        peer.rows_written_per_unit,
                        peer.sink_cpu_us_per_unit,
                        f"{peer.units} {note}",
                    )
                )
        for steps, result in sorted(self.effectusd.items(), reverse=True):
            against = self.dbos_ratio(steps)
            chained = self.chain_ratio(steps)
            lines.append(
                _row(
                    f"effectusd, {steps}-step sagas",
                    result.steps_per_s,
                    self.ratio(steps),
                    result.cpu_us_per_step,
                    result.db_cpu_us_per_step,
                    result.wal_bytes_per_step,
                    result.rows_written_per_step,
                    result.sink_cpu_us_per_step,
                    ("" if chained is None else f"chains ratio {chained}, ")
                    + ("" if against is None else f"DBOS ratio {against}, ")
                    + f"efficiency {result.efficiency}, idle p50 "
                    f"{result.idle_enqueue_to_dispatch_p50_ms} ms (p99 "
                    f"{result.idle_enqueue_to_dispatch_p99_ms}), "
                    f"{result.commits_per_step} commits/step",
                )
            )
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "transport": self.transport,
            "delivery": self.delivery,
            "pgqueuer_jobs_per_s": self.pgqueuer_jobs_per_s,
            "pgqueuer_runs": self.pgqueuer_runs,
            "pgqueuer_cpu_us_per_job": self.pgqueuer_cpu_us_per_job,
            "pgqueuer_db_cpu_us_per_job": self.pgqueuer_db_cpu_us_per_job,
            "pgqueuer_wal_bytes_per_job": self.pgqueuer_wal_bytes_per_job,
            "pgqueuer_rows_written_per_job": self.pgqueuer_rows_written_per_job,
            "pgqueuer_efficiency": self.pgqueuer_efficiency,
            "pgqueuer_sink_cpu_us_per_job": self.pgqueuer_sink_cpu_us_per_job,
            "dbos": None if self.dbos is None else asdict(self.dbos),
            "chain": self.chain,
            "pgqueuer_chains": None if self.chains is None else asdict(self.chains),
            "ratios_to_chains": {str(steps): self.chain_ratio(steps) for steps in self.effectusd},
            "effectusd": {str(steps): asdict(result) for steps, result in self.effectusd.items()},
            "ratios": {str(steps): self.ratio(steps) for steps in self.effectusd},
            "ratios_to_dbos": {str(steps): self.dbos_ratio(steps) for steps in self.effectusd},
        }


def compare(
    server_url: str,
    *,
    sagas: int,
    step_counts: tuple[int, ...],
    concurrency: int,
    dbos_workflows: int = 0,
    progress: Callable[[str], None] = print,
    transport: str = DEFAULT_TRANSPORT,
    delivery: str = "at_most_once",
) -> Comparison:
    """pgqueuer, its chains (as long as the longest plan, if longer than one step), DBOS
    (unless ``dbos_workflows`` is 0), effectusd for each step count, pgqueuer again: one sink,
    one concurrency. pgqueuer drains as many jobs as the largest effectusd run has steps;
    effectusd's steps have ``delivery``."""
    chain = max(step_counts)
    jobs = sagas * chain
    with start_sink() as sink:
        progress(f"pgqueuer: {jobs} job(s) at concurrency {concurrency}…")
        before = run_pgqueuer(server_url, sink, jobs, concurrency)
        chains = None
        if chain > 1:
            progress(f"pgqueuer: {jobs // chain} chain(s) of {chain} job(s)…")
            chains = run_pgqueuer(server_url, sink, jobs, concurrency, chain)
        dbos = None
        if dbos_workflows:
            from effectusd.bench.dbos_peer import STEPS, run_dbos

            progress(f"DBOS: {dbos_workflows} workflow(s) of {STEPS} step(s)…")
            dbos = run_dbos(server_url, sink.url, dbos_workflows, concurrency)
        results = {}
        for steps in step_counts:
            count = jobs // steps
            progress(f"effectusd: {count} saga(s) of {steps} step(s)…")
            results[steps] = run_bench(
                server_url,
                count,
                steps,
                concurrency,
                destination=sink,
                progress=progress,
                transport=transport,
                delivery=delivery,
            )
        progress(f"pgqueuer again: {jobs} job(s)…")
        after = run_pgqueuer(server_url, sink, jobs, concurrency)

    def both_measured(reading: str) -> float | None:
        """The mean of a reading both runs took, else None."""
        runs = [getattr(run, reading) for run in (before, after)]
        return None if None in runs else round(statistics.fmean(runs), 1)

    def both(reading: str, digits: int = 1) -> float:
        """The mean of a reading of the run before effectusd's and the run after."""
        return round(statistics.fmean(getattr(run, reading) for run in (before, after)), digits)

    return Comparison(
        concurrency,
        both("units_per_s"),
        [before.units_per_s, after.units_per_s],
        both("cpu_us_per_unit"),
        both_measured("db_cpu_us_per_unit"),
        both("wal_bytes_per_unit"),
        both("rows_written_per_unit", 2),
        results,
        dbos,
        chains,
        chain,
        transport,
        delivery,
        both_measured("sink_cpu_us_per_unit"),
    )


def _us(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}"


def _row(
    label: str,
    rate: float,
    ratio: float,
    cpu_us: float,
    db_cpu_us: float | None,
    wal_bytes: float,
    rows: float,
    sink_cpu_us: float | None,
    notes: str,
) -> str:
    """One line of the table, in its columns."""
    return (
        f"{label:<34}{rate:>10.0f}{ratio:>8.2f}{cpu_us:>9.0f}{_us(db_cpu_us):>8}"
        f"{wal_bytes:>8.0f}{rows:>6.1f}{_us(sink_cpu_us):>9}  {notes}"
    )


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m effectusd.bench.peers",
        description="effectusd beside pgqueuer (bare jobs, and chains as long as the longest "
        "plan) and DBOS (the peers through aiohttp) on the same sink, in one run.",
    )
    parser.add_argument(
        "--transport",
        choices=sorted(EXECUTOR_CLASSES),
        default=DEFAULT_TRANSPORT,
        help=f"effectusd's HTTP transport (default: {DEFAULT_TRANSPORT}, the destination default)",
    )
    parser.add_argument(
        "--database-url",
        default="postgresql://postgres@127.0.0.1:5432/postgres",
        help="a PostgreSQL server where scratch databases may be created and dropped",
    )
    parser.add_argument("--sagas", type=int, default=1000, help="sagas of the longest plan")
    parser.add_argument(
        "--steps", default="5,1", help="comma-separated step counts of the effectusd runs"
    )
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument(
        "--dbos-workflows",
        type=int,
        default=400,
        help="five-step DBOS workflows to drain (0 skips DBOS; needs the `peers` extra)",
    )
    parser.add_argument(
        "--delivery",
        choices=["at_most_once", "at_least_once"],
        default="at_most_once",
        help="effectusd's steps' delivery (default: at_most_once, the verbs' default; "
        "at_least_once is that of a job picked again when its worker dies)",
    )
    parser.add_argument("--skip-dbos", action="store_true", help="the same as --dbos-workflows 0")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    try:
        step_counts = tuple(int(part) for part in args.steps.split(","))
    except ValueError:
        parser.error("--steps: comma-separated whole numbers, e.g. 5,1")
    if args.sagas < 1 or args.concurrency < 1 or min(step_counts) < 1:
        parser.error("--sagas, --concurrency and every step count must be at least 1")
    if args.dbos_workflows < 0:
        parser.error("--dbos-workflows must be at least 0")
    result = compare(
        args.database_url,
        sagas=args.sagas,
        step_counts=step_counts,
        concurrency=args.concurrency,
        dbos_workflows=0 if args.skip_dbos else args.dbos_workflows,
        progress=(lambda _: None) if args.json else _say,
        transport=args.transport,
        delivery=args.delivery,
    )
    print(json.dumps(result.as_json(), indent=2) if args.json else result.table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

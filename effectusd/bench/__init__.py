"""`effectusd bench`: throughput and latency of the whole pipeline against a no-op destination.

A benchmark, never a test: it prints what it measured on this machine. Beside the pipeline it
runs a bare loop of the same executor class against the same sink (no database), so
``efficiency`` says how much of the transport's speed the pipeline keeps. ``duration`` adds a
soak (submissions at the measured pace, the daemon's RSS sampled); ``backlog`` adds the claim
statement's latency on an empty outbox, over one batch of ready rows and over that many.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import statistics
import time
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from effectusd.backends.postgres import connect, database_name
from effectusd.backends.postgres.migrations import migrate as migrate_set
from effectusd.bench.claims import (
    CLAIM_MIN_SAMPLES,
    build_backlog,
    claim_latency,
    claim_params,
    time_claims,
)
from effectusd.bench.database import (
    drop_database,
    read_latencies,
    scalar,
    scratch_database,
    settled_scalar,
    sql,
)
from effectusd.bench.fleet import bench_stores, serving, split_sagas, store_config
from effectusd.bench.harness import (
    Sink,
    bench_plan,
    checked,
    daemon_with_submitter,
    sink_cpu_used,
    start_sink,
    with_executors,
)
from effectusd.bench.measures import (
    RSS_SAMPLE_S,
    DatabaseCpu,
    DrainTotals,
    RssSampler,
    daemon_rss_mb,
    percentile,
)
from effectusd.bench.soak import run_soak
from effectusd.client import Client
from effectusd.config import Config, parse_config
from effectusd.core.states import Direction, FencingStatus
from effectusd.core.stores import Store
from effectusd.core.submission import ensure_checked
from effectusd.executors.protocol import Executor, Invocation
from effectusd.store.sql import POSTGRES_MIGRATIONS

IDLE_SAMPLES = 100  # sagas submitted one at a time for the idle latency


@dataclass
class BenchResult:
    processes: int  # daemon processes dispatching side by side (`run --processes`)
    stores: int  # scratch databases on the one server, each a store served by one daemon
    sagas: int
    steps_per_saga: int
    concurrency: int
    steps: int
    seconds: float
    steps_per_s: float
    enqueue_to_dispatch_p50_ms: float
    enqueue_to_dispatch_p99_ms: float
    idle_enqueue_to_dispatch_p50_ms: float
    idle_enqueue_to_dispatch_p99_ms: float  # of IDLE_SAMPLES sagas: about their second worst
    commits_per_step: float  # summed over the stores' databases, as rows_written_per_step
    completed: int
    completed_per_store: list[int]  # sagas completed in each store, in the order made
    transport: str
    delivery: str  # the bench verb's: at_least_once steps may wait in the daemon for a slot
    bare_calls_per_s: float  # the same executor class, same concurrency and sink, no database
    efficiency: float  # steps_per_s / bare_calls_per_s
    wal_bytes_per_step: float  # whole-cluster WAL: other writers on the server count too
    # row versions the drain wrote in the bench's database (inserted, updated, deleted)
    rows_written_per_step: float
    rss_mb: float  # resident set of the process that ran the daemon, after the run
    # CPU the daemon's process spent per step (all of it: claim, write-ahead, call, record),
    # and the bare loop's per call: unlike rates, these hardly move when the machine is busy
    cpu_us_per_step: float
    bare_cpu_us_per_call: float
    # CPU the backends serving the bench's database spent per step over the drain, when the
    # server runs on this machine (None: it does not); the server's shared background
    # processes are not counted (measures.DatabaseCpu); its CPU is taken from the daemon's
    db_cpu_us_per_step: float | None
    # CPU the bench's no-op sink spent per step over the drain: answering the daemon's
    # requests (None: the bench drove another --destination)
    sink_cpu_us_per_step: float | None
    # the backends each store's database had over the drain: the daemon's connections to it
    # (None: the server is on another machine)
    connections_per_store: list[int] | None
    # what the database took: where PostgreSQL binds as daemons are added (docs/performance.md)
    commits_per_s: float
    wal_bytes_per_s: float
    # RSS over the drain (one process): flat means the backlog is streamed, not held
    drain_rss_mb_start: float | None
    drain_rss_mb_max: float | None
    # the RSS one minute into the drain, and the most it grew after that (None: the drain was
    # shorter): "flat from the first minute" is a growth near zero
    drain_rss_mb_minute: float | None
    drain_rss_mb_growth_after_minute: float | None
    # claim_ready.sql on an empty outbox, over one batch of ready rows and over `backlog` of
    # them (None: skipped); backlog/batch is the backlog's own cost, backlog/empty the target's
    backlog: int = 0
    claim_p50_ms_empty: float | None = None
    claim_p99_ms_empty: float | None = None
    claim_p50_ms_batch: float | None = None
    claim_p99_ms_batch: float | None = None
    claim_p50_ms_backlog: float | None = None
    claim_p99_ms_backlog: float | None = None
    claim_backlog_ratio_p99: float | None = None
    claim_backlog_vs_batch_ratio_p99: float | None = None
    # the soak (--duration): sagas submitted at the measured pace, the daemon's RSS sampled
    soak_seconds: float | None = None
    soak_steps_per_s: float | None = None
    soak_running_sagas_end: int | None = None  # the backlog the soak left: pace vs keeping up
    rss_mb_start: float | None = None
    rss_mb_end: float | None = None
    rss_mb_max: float | None = None


def _bench_config(
    base_url: str, concurrency: int, transport: str | None, delivery: str = "at_most_once"
) -> Config:
    sink: dict[str, Any] = {"base_url": base_url, "max_concurrency": concurrency, "timeout": "10s"}
    if transport is not None:
        sink["transport"] = transport
    return parse_config(
        {
            "dispatcher": {"concurrency": concurrency, "poll_interval": "100ms"},
            "database": {"pool_max_size": 10},
            "destinations": {"sink": sink},
            "verbs": {"sink.noop": {"destination": "sink", "path": "/noop", "delivery": delivery}},
        }
    )


def run_bench(
    server_url: str,
    sagas: int,
    steps: int,
    concurrency: int,
    destination: str | Sink | None = None,
    progress: Any = print,
    transport: str | None = None,
    *,
    backlog: int = 0,
    duration: float = 0.0,
    processes: int = 1,
    delivery: str = "at_most_once",
    stores: int = 1,
) -> BenchResult:
    """``transport`` picks the executor class ("asyncio", "aiohttp" or "httpx"); None keeps the
    config's default. ``duration`` > 0 adds the soak, ``backlog`` > 0 the claim latency,
    ``processes`` > 1 dispatches with that many daemon processes (each with ``concurrency``),
    ``delivery`` is the bench verb's, ``stores`` > 1 splits the sagas among that many
    databases served by one daemon (not with ``processes`` or ``duration``). ``destination``
    None starts the no-op sink; a running ``Sink`` is driven and its CPU read; a URL is
    driven as it is."""
    if stores > 1 and (processes > 1 or duration > 0):
        raise ValueError("stores: several stores are benched with one process and no soak")
    with ExitStack() as stack:
        if destination is None:
            destination = stack.enter_context(start_sink())
        sink = destination if isinstance(destination, Sink) else None
        base_url = destination.url if isinstance(destination, Sink) else destination
        config = _bench_config(base_url, concurrency, transport, delivery)
        urls: list[str] = []
        try:
            for _ in range(stores):
                urls.append(scratch_database(server_url))
                with connect(urls[-1]) as conn:
                    migrate_set(conn, POSTGRES_MIGRATIONS)
            result = _throughput(config, urls, sagas, steps, concurrency, progress, processes, sink)
            if duration > 0:
                _soak(result, config, urls[0], duration, progress)
        finally:
            for url in urls:
                drop_database(server_url, url)
    if backlog > 0:
        _claims(result, claim_latency(server_url, config, backlog, progress), backlog)
    return result


def _submit_all(config: Config, url: str, sagas: int, steps: int) -> None:
    client = Client(config, database_url=url)
    with connect(url, autocommit=False) as conn:
        for index in range(sagas):
            client.submit(bench_plan(steps), execution_id=f"bench-{index}", conn=conn)
            if index % 500 == 499:
                conn.commit()
        conn.commit()


def _throughput(
    config: Config,
    urls: list[str],
    sagas: int,
    steps: int,
    concurrency: int,
    progress: Any,
    processes: int = 1,
    sink: Sink | None = None,
) -> BenchResult:
    """Submit the sagas (split among the stores of ``urls``), dispatch them all (in this
    process, or in ``processes`` daemon processes side by side, as `run --processes` runs
    them), and take the readings, the database's summed over the stores."""
    stores = bench_stores(urls, config.namespace)
    chosen = config.destinations["sink"].transport
    progress(f"bare {chosen} loop at concurrency {concurrency}…")
    bare, bare_cpu_us = asyncio.run(_bare_calls_per_s(config, concurrency))
    progress(f"submitting {sagas} saga(s) of {steps} step(s) into {len(stores)} store(s)…")
    for store, count in zip(stores, split_sagas(sagas, len(stores)), strict=True):
        _submit_all(store_config(config, store), store.url, count, steps)
    # the submit's sessions have reported; the WAL is the server's, read once
    commits_before = sum(settled_scalar(url, "commits") for url in urls)
    rows_before = sum(scalar(url, "rows_written") for url in urls)
    wal_before = scalar(urls[0], "wal_position")
    progress(
        f"dispatching {sagas * steps} step(s) at concurrency {concurrency} ({chosen})"
        + (f" in {processes} processes…" if processes > 1 else "…")
    )
    sink_before = None if sink is None else sink.cpu_seconds()
    with DatabaseCpu(*(database_name(url) for url in urls)) as database_cpu:
        seconds, cpu_seconds, drain_rss = _dispatch_all(config, stores, processes)
    sink_cpu_s = sink_cpu_used(sink, sink_before)
    totals = DrainTotals(
        steps=sagas * steps,
        seconds=seconds,
        cpu_s=cpu_seconds,
        db_cpu_s=database_cpu.seconds,
        wal_bytes=scalar(urls[0], "wal_position") - wal_before,
        commits=sum(settled_scalar(url, "commits") for url in urls) - commits_before,
        rows_written=sum(scalar(url, "rows_written") for url in urls) - rows_before,
        sink_cpu_s=sink_cpu_s,
    )
    rss_mb = daemon_rss_mb()
    completed = [_states(url).get("completed", 0) for url in urls]
    latencies = [latency for url in urls for latency in read_latencies(url)]
    progress("measuring idle enqueue→dispatch latency…")
    idle = asyncio.run(_idle_latency(config, stores, samples=IDLE_SAMPLES))
    minute, growth = after_a_minute(drain_rss)
    return BenchResult(
        processes=processes,
        stores=len(stores),
        sagas=sagas,
        steps_per_saga=steps,
        concurrency=concurrency,
        steps=totals.steps,
        seconds=round(seconds, 3),
        steps_per_s=totals.steps_per_s(),
        enqueue_to_dispatch_p50_ms=round(percentile(latencies, 50), 2),
        enqueue_to_dispatch_p99_ms=round(percentile(latencies, 99), 2),
        idle_enqueue_to_dispatch_p50_ms=round(statistics.median(idle), 2) if idle else float("nan"),
        idle_enqueue_to_dispatch_p99_ms=round(percentile(idle, 99), 2),
        commits_per_step=totals.commits_per_step(),
        completed=sum(completed),
        completed_per_store=completed,
        transport=chosen,
        delivery=config.verbs["sink.noop"].delivery.value,
        bare_calls_per_s=round(bare, 1),
        efficiency=round(totals.steps / seconds / bare, 3),
        wal_bytes_per_step=totals.wal_bytes_per_step(),
        rows_written_per_step=totals.rows_written_per_step(),
        rss_mb=round(rss_mb, 1),
        cpu_us_per_step=totals.cpu_us_per_step(),
        bare_cpu_us_per_call=round(bare_cpu_us, 1),
        db_cpu_us_per_step=totals.db_cpu_us_per_step(),
        sink_cpu_us_per_step=totals.sink_cpu_us_per_step(),
        connections_per_store=database_cpu.backends(),
        commits_per_s=totals.commits_per_s(),
        wal_bytes_per_s=totals.wal_bytes_per_s(),
        drain_rss_mb_start=round(drain_rss[0], 1) if drain_rss else None,
        drain_rss_mb_max=round(max(drain_rss), 1) if drain_rss else None,
        drain_rss_mb_minute=minute,
        drain_rss_mb_growth_after_minute=growth,
    )


def after_a_minute(samples: list[float]) -> tuple[float | None, float | None]:
    """The RSS one minute into the drain and how much it grew after that, from RssSampler's
    samples (every RSS_SAMPLE_S); (None, None) for a drain shorter than a minute."""
    later = samples[round(60 / RSS_SAMPLE_S) :]
    if not later:
        return None, None
    return round(later[0], 1), round(max(later) - later[0], 1)


def _states(url: str) -> dict[str, int]:
    with connect(url) as conn:
        return {row[0]: int(row[1]) for row in conn.execute(sql("outcomes")).fetchall()}


def _dispatch_all(
    config: Config, stores: list[Store], processes: int
) -> tuple[float, float, list[float]]:
    """Run daemons until every store's outbox is idle: wall seconds, the CPU seconds they used
    and (one process) its RSS sampled over the drain. Each daemon process starts (imports,
    connects nothing yet) before the clock does; several stores are one process's."""
    if processes == 1:
        started, cpu_started = time.perf_counter(), time.process_time()
        with RssSampler(RSS_SAMPLE_S) as rss:
            asyncio.run(_drain(config, stores))
        return time.perf_counter() - started, time.process_time() - cpu_started, rss.samples
    [url] = [store.url for store in stores]
    spawn = multiprocessing.get_context("spawn")
    ready, go, cpu = spawn.Barrier(processes + 1), spawn.Event(), spawn.Queue()
    daemons = [
        spawn.Process(target=_drain_in_process, args=(config, url, ready, go, cpu))
        for _ in range(processes)
    ]
    for daemon in daemons:
        daemon.start()
    ready.wait(timeout=120)
    started = time.perf_counter()
    go.set()
    used = [cpu.get(timeout=3600) for _ in daemons]
    seconds = time.perf_counter() - started
    for daemon in daemons:
        daemon.join()
    if any(daemon.exitcode != 0 for daemon in daemons):
        raise RuntimeError(f"a bench daemon failed: {[d.exitcode for d in daemons]}")
    return seconds, sum(used), []


async def _drain(config: Config, stores: list[Store]) -> None:
    code = await with_executors(config, lambda ex: serving(config, stores, ex).run(True))
    if code:
        raise RuntimeError(f"a bench store could not be served ({code}): see the log above")


def _drain_in_process(config: Config, url: str, ready: Any, go: Any, cpu: Any) -> None:
    """One of `bench --processes N`'s daemons (its own process, its own owner id): says it
    is ready, waits for the start, drains, and reports the CPU seconds the drain took."""
    ready.wait()
    go.wait()
    cpu_started = time.process_time()
    try:
        asyncio.run(_drain(config, bench_stores([url], config.namespace)))
    finally:
        cpu.put(time.process_time() - cpu_started)


def _soak(result: BenchResult, config: Config, url: str, duration: float, progress: Any) -> None:
    steps = result.steps_per_saga
    pace = result.steps / result.seconds / steps
    progress(f"soak: {pace:.1f} saga(s)/s of {steps} step(s) for {duration:.0f} s…")
    soak = asyncio.run(run_soak(config, url, steps, pace, duration, progress))
    result.soak_seconds = round(soak.seconds, 1)
    result.soak_steps_per_s = round(soak.steps / soak.seconds, 1)
    result.soak_running_sagas_end = soak.running_end
    result.rss_mb_start = round(soak.rss_mb[0], 1)
    result.rss_mb_end = round(soak.rss_mb[-1], 1)
    result.rss_mb_max = round(max(soak.rss_mb), 1)


def _claims(result: BenchResult, timings: dict[str, list[float]], backlog: int) -> None:
    result.backlog = backlog
    p99 = {label: percentile(values, 99) for label, values in timings.items()}
    for label, values in timings.items():
        setattr(result, f"claim_p50_ms_{label}", round(percentile(values, 50), 3))
        setattr(result, f"claim_p99_ms_{label}", round(p99[label], 3))
    result.claim_backlog_ratio_p99 = round(p99["backlog"] / p99["empty"], 2)
    result.claim_backlog_vs_batch_ratio_p99 = round(p99["backlog"] / p99["batch"], 2)


async def _bare_calls_per_s(
    config: Config, concurrency: int, seconds: float = 2.0
) -> tuple[float, float]:
    """Calls/s of the bare executor against the sink (``concurrency`` callers, no database)
    and the CPU µs each call took."""
    inv = Invocation(
        request_id="bench",
        execution_id="bench",
        saga_id="0" * 64,
        effect_id="s0",
        attempt=1,
        direction=Direction.FORWARD,
        verb="sink.noop",
        method="POST",
        path="/noop",
        body=b'{"i":0}',
        argument_hash="0" * 64,
        contract_hash="0" * 64,
        idempotency_key="0" * 64,
        fencing_grants=(),
        deadline=datetime.now(UTC) + timedelta(hours=1),
        key_issued_at=datetime.now(UTC),
        timeout=10.0,
        dispatch_id=0,  # no dispatch: the bare calls' completions are read, never recorded
        lease_token=None,
        fencing_sent=FencingStatus.NOT_REQUESTED,
    )

    async def loop(executors: Mapping[str, Executor]) -> tuple[float, float]:
        executor = executors["sink"]
        for _ in range(concurrency * 20):  # warm up: connections, caches
            await checked(executor.call(inv))
        calls = 0
        stop = time.perf_counter() + seconds

        async def caller() -> None:
            nonlocal calls
            while time.perf_counter() < stop:
                await checked(executor.call(inv))
                calls += 1

        started, cpu_started = time.perf_counter(), time.process_time()
        await asyncio.gather(*(caller() for _ in range(concurrency)))
        cpu = time.process_time() - cpu_started
        return calls / (time.perf_counter() - started), cpu / calls * 1e6

    rate, cpu_us = await with_executors(config, loop)
    return rate, cpu_us


async def _idle_latency(config: Config, stores: list[Store], samples: int) -> list[float]:
    """Submit one saga at a time to an idle, running daemon (serving every store; the sagas go
    into the first): time from its outbox row's insert to its write-ahead (sent_at). The
    submitter is its own process, so waiting for each saga does not take the daemon's
    interpreter lock."""
    url = stores[0].url
    spawn = multiprocessing.get_context("spawn")
    submitter = spawn.Process(
        target=_submit_one_at_a_time, args=(store_config(config, stores[0]), url, samples)
    )
    async with daemon_with_submitter(config, url, submitter, stores):
        await asyncio.to_thread(submitter.join, 120)
        if submitter.exitcode != 0:
            raise RuntimeError(f"the idle-latency submitter failed ({submitter.exitcode})")
    return read_latencies(url, "idle_latencies")


def _submit_one_at_a_time(config: Config, url: str, samples: int) -> None:
    """The idle-latency submitter (its own process): the next saga once the last was sent."""
    client = Client(config, database_url=url)
    plan = ensure_checked(bench_plan(1), client.registry)
    with connect(url) as conn:
        for index in range(samples):
            saga = client.submit(plan, execution_id=f"idle-{index}")
            while not conn.execute(sql("sent"), {"saga_id": saga.saga_id}).fetchone():
                time.sleep(0.002)
            time.sleep(0.02)  # idle again: nothing in flight, nothing queued


def format_result(result: BenchResult) -> str:
    rows = {key: value for key, value in asdict(result).items() if value is not None}
    width = max(len(key) for key in rows)
    return "\n".join(f"{key:<{width}}  {value}" for key, value in rows.items())


__all__ = [
    "CLAIM_MIN_SAMPLES",
    "BenchResult",
    "build_backlog",
    "claim_params",
    "format_result",
    "run_bench",
    "time_claims",
]

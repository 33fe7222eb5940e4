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
import os
import resource
import statistics
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from effectusd.client import Client
from effectusd.config import Config, parse_config
from effectusd.core.states import Direction, OutcomeClass
from effectusd.core.submission import ensure_checked
from effectusd.dispatcher.daemon import Daemon, new_owner_id
from effectusd.dispatcher.pipeline import Capacity
from effectusd.executors.factory import executor_for
from effectusd.executors.protocol import Executor, Invocation
from effectusd.store.postgres.migrations import migrate
from effectusd.store.postgres.queries import sql

_REPLY = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
    b"Connection: keep-alive\r\n\r\n{}"
)


class _NoopProtocol(asyncio.Protocol):
    """Answers every request with 200 {} as fast as asyncio can (keep-alive)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            length = 0
            for line in self.buffer[:head_end].split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            total = head_end + 4 + length
            if len(self.buffer) < total:
                return
            self.buffer = self.buffer[total:]
            self.transport.write(_REPLY)


def _serve_noop(port: int, ready: Any) -> None:
    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(_NoopProtocol, "127.0.0.1", port)
        ready.set()
        async with server:
            await server.serve_forever()

    asyncio.run(main())


@dataclass
class BenchResult:
    sagas: int
    steps_per_saga: int
    concurrency: int
    steps: int
    seconds: float
    steps_per_s: float
    enqueue_to_dispatch_p50_ms: float
    enqueue_to_dispatch_p99_ms: float
    idle_enqueue_to_dispatch_p50_ms: float
    commits_per_step: float
    completed: int
    transport: str
    bare_calls_per_s: float  # the same executor class, same concurrency and sink, no database
    efficiency: float  # steps_per_s / bare_calls_per_s
    wal_bytes_per_step: float  # whole-cluster WAL: other writers on the server count too
    rss_mb: float  # resident set of the process that ran the daemon, after the run
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


def _bench_config(base_url: str, concurrency: int, transport: str | None) -> Config:
    sink: dict[str, Any] = {"base_url": base_url, "max_concurrency": concurrency, "timeout": "10s"}
    if transport is not None:
        sink["transport"] = transport
    return parse_config(
        {
            "dispatcher": {"concurrency": concurrency, "poll_interval": "100ms"},
            "database": {"pool_max_size": 10},
            "destinations": {"sink": sink},
            "verbs": {"sink.noop": {"destination": "sink", "path": "/noop"}},
        }
    )


def _plan(steps: int) -> dict[str, Any]:
    return {
        "plan_id": f"bench-{steps}",
        "steps": [
            {"id": f"s{i}", "verb": "sink.noop", "args": {"i": i}, "compensate": "none"}
            for i in range(steps)
        ],
    }


def _percentile(values: list[float], pct: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def _scratch_database(server_url: str) -> str:
    name = f"effectusd_bench_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return psycopg.conninfo.make_conninfo(server_url, dbname=name)


def _drop_database(server_url: str, url: str) -> None:
    name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run_bench(
    server_url: str,
    sagas: int,
    steps: int,
    concurrency: int,
    destination: str | None = None,
    progress: Any = print,
    transport: str | None = None,
    *,
    backlog: int = 0,
    duration: float = 0.0,
) -> BenchResult:
    """``transport`` picks the executor class ("httpx" or "aiohttp"); None keeps the config's
    default. ``duration`` > 0 adds the soak, ``backlog`` > 0 the claim latency."""
    sink = None
    if destination is None:
        port = _free_port()
        ready = multiprocessing.get_context("spawn").Event()
        sink = multiprocessing.get_context("spawn").Process(
            target=_serve_noop, args=(port, ready), daemon=True
        )
        sink.start()
        if not ready.wait(30):
            sink.terminate()
            raise RuntimeError(f"the bench's no-op destination did not start on port {port}")
        destination = f"http://127.0.0.1:{port}"
    url = _scratch_database(server_url)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            migrate(conn)
        config = _bench_config(destination, concurrency, transport)
        chosen = config.destinations["sink"].transport
        progress(f"bare {chosen} loop at concurrency {concurrency}…")
        bare = asyncio.run(_bare_calls_per_s(config, concurrency))
        client = Client(config, database_url=url)
        progress(f"submitting {sagas} saga(s) of {steps} step(s)…")
        with psycopg.connect(url) as conn:
            for index in range(sagas):
                client.submit(_plan(steps), execution_id=f"bench-{index}", conn=conn)
                if index % 500 == 499:
                    conn.commit()
            conn.commit()
        commits_before = _scalar(url, "bench_commits")
        wal_before = _scalar(url, "bench_wal_position")
        progress(f"dispatching {sagas * steps} step(s) at concurrency {concurrency} ({chosen})…")
        started = time.perf_counter()
        asyncio.run(_with_executors(config, lambda ex: Daemon(config, url, executors=ex).run(True)))
        seconds = time.perf_counter() - started
        wal_bytes = _scalar(url, "bench_wal_position") - wal_before
        rss_mb = _rss_mb()
        with psycopg.connect(url) as conn:
            states: dict[str, int] = {
                row[0]: int(row[1]) for row in conn.execute(sql("bench_outcomes")).fetchall()
            }
        commits = _settled_commits(url) - commits_before
        latencies = _latencies(url)
        progress("measuring idle enqueue→dispatch latency…")
        idle = asyncio.run(_idle_latency(config, url, samples=30))
        total = sagas * steps
        result = BenchResult(
            sagas=sagas,
            steps_per_saga=steps,
            concurrency=concurrency,
            steps=total,
            seconds=round(seconds, 3),
            steps_per_s=round(total / seconds, 1),
            enqueue_to_dispatch_p50_ms=round(_percentile(latencies, 50), 2),
            enqueue_to_dispatch_p99_ms=round(_percentile(latencies, 99), 2),
            idle_enqueue_to_dispatch_p50_ms=round(statistics.median(idle), 2)
            if idle
            else float("nan"),
            commits_per_step=round(commits / total, 2),
            completed=states.get("completed", 0),
            transport=chosen,
            bare_calls_per_s=round(bare, 1),
            efficiency=round(total / seconds / bare, 3),
            wal_bytes_per_step=round(wal_bytes / total, 1),
            rss_mb=round(rss_mb, 1),
        )
        if duration > 0:
            pace = total / seconds / steps
            progress(f"soak: {pace:.1f} saga(s)/s of {steps} step(s) for {duration:.0f} s…")
            soak = asyncio.run(_soak(config, url, steps, pace, duration, progress))
            result.soak_seconds = round(soak.seconds, 1)
            result.soak_steps_per_s = round(soak.steps / soak.seconds, 1)
            result.soak_running_sagas_end = soak.running_end
            result.rss_mb_start = round(soak.rss_mb[0], 1)
            result.rss_mb_end = round(soak.rss_mb[-1], 1)
            result.rss_mb_max = round(max(soak.rss_mb), 1)
    finally:
        _drop_database(server_url, url)
        if sink is not None:
            sink.terminate()
            sink.join(5)
    if backlog > 0:
        timings = claim_latency(server_url, config, backlog, progress)
        result.backlog = backlog
        p99 = {label: _percentile(values, 99) for label, values in timings.items()}
        for label, values in timings.items():
            setattr(result, f"claim_p50_ms_{label}", round(_percentile(values, 50), 3))
            setattr(result, f"claim_p99_ms_{label}", round(p99[label], 3))
        result.claim_backlog_ratio_p99 = round(p99["backlog"] / p99["empty"], 2)
        result.claim_backlog_vs_batch_ratio_p99 = round(p99["backlog"] / p99["batch"], 2)
    return result


# -- claim latency: the daemon's claim statement, empty outbox against a large backlog ---------
CLAIM_SAMPLES = 300
CLAIM_WARMUP = 15  # past psycopg's prepare threshold and the server's generic-plan choice
CLAIM_BUDGET_S = 60.0  # a slow claim stops the sampling here, once CLAIM_MIN_SAMPLES are in
CLAIM_MIN_SAMPLES = 30
BACKLOG_CHUNK = 100_000


def claim_latency(
    server_url: str, config: Config, backlog: int, progress: Any
) -> dict[str, list[float]]:
    """Milliseconds per claim_ready.sql, with the daemon's parameters, in a scratch database of
    its own (dropped afterwards): on an empty outbox ("empty"), over exactly one batch of ready
    rows ("batch": the same work per claim as over the backlog, so backlog/batch isolates the
    backlog's cost) and over ``backlog`` ready rows. Each claim runs in a transaction that is
    rolled back, so the rows stay ready."""
    url = _scratch_database(server_url)
    try:
        with psycopg.connect(url, autocommit=True) as conn:  # autocommit, like the daemon's
            migrate(conn)
            params = claim_params(config)
            batch = min(backlog, sum(params["limits"]))
            timings = {"empty": time_claims(conn, params, 0, "an empty outbox", progress)}
            build_backlog(conn, config, range(1, batch + 1), backlog, progress)
            timings["batch"] = time_claims(conn, params, batch, f"{batch} ready rows", progress)
            build_backlog(conn, config, range(batch + 1, backlog + 1), backlog, progress)
            what = f"{backlog:,} ready rows"
            timings["backlog"] = time_claims(conn, params, batch, what, progress)
    finally:
        _drop_database(server_url, url)
    return timings


def claim_params(config: Config) -> dict[str, Any]:
    """What the daemon's first claim passes: the free capacity of an idle pipeline, an owner
    id, the lease margin (as Daemon.run and PostgresDispatchStore.claim build them)."""
    free = Capacity(
        limits={name: d.max_concurrency for name, d in config.destinations.items()},
        total_limit=config.dispatcher.concurrency,
    ).free()
    return {
        "destinations": list(free),
        "limits": list(free.values()),
        "owner": new_owner_id(),
        "margin_s": config.dispatcher.lease_margin.total_seconds(),
    }


def time_claims(
    conn: psycopg.Connection[Any], params: dict[str, Any], expect: int, what: str, progress: Any
) -> list[float]:
    query = sql("claim_ready")
    timings: list[float] = []
    give_up = time.monotonic() + CLAIM_BUDGET_S
    for index in range(CLAIM_WARMUP + CLAIM_SAMPLES):
        with conn.transaction(force_rollback=True):  # the claimed rows stay ready
            started = time.perf_counter()
            claimed = len(conn.execute(query, params).fetchall())
            elapsed_ms = (time.perf_counter() - started) * 1000
        if claimed != expect:
            raise RuntimeError(
                f"claim_ready claimed {claimed} row(s) over {what}, expected {expect}: the "
                "claim latency would not be measuring a claim"
            )
        if index >= CLAIM_WARMUP:
            timings.append(elapsed_ms)
        if time.monotonic() > give_up and len(timings) >= CLAIM_MIN_SAMPLES:
            break
    p99 = _percentile(timings, 99)
    progress(f"claim latency over {what}: {len(timings)} claims, p99 {p99:.2f} ms")
    return timings


def build_backlog(
    conn: psycopg.Connection[Any], config: Config, rows: range, total: int, progress: Any
) -> None:
    """Backlog rows ``rows`` (of ``total``): queued dispatches of the config's first verb, one
    running saga and one started step each, by INSERT … SELECT generate_series in chunks; then
    VACUUM ANALYZE, the state autovacuum reaches soon after such a burst."""
    verb_name, verb = next(iter(config.verbs.items()))
    params = {
        "namespace": config.namespace,
        "verb": verb_name,
        "destination": verb.destination,
        "path": verb.path,
        "total": total,
    }
    started = time.perf_counter()
    for first in range(rows.start, rows.stop, BACKLOG_CHUNK):
        last = min(first + BACKLOG_CHUNK, rows.stop) - 1
        conn.execute(sql("bench_backlog"), {**params, "first": first, "last": last})
        progress(f"backlog: {last:,}/{total:,} ready rows ({time.perf_counter() - started:.0f} s)")
    conn.execute(sql("bench_vacuum_analyze"))


# -- the soak: submissions at the measured pace, the daemon's resident set sampled -------------
SOAK_SAMPLE_S = 5.0
SOAK_PROGRESS_S = 30.0


@dataclass
class Soak:
    seconds: float
    steps: int  # steps that succeeded during the soak
    running_end: int
    rss_mb: list[float]


async def _soak(
    config: Config, url: str, steps: int, sagas_per_s: float, seconds: float, progress: Any
) -> Soak:
    """Run the daemon while another process submits ``sagas_per_s`` for ``seconds``; sample
    this process's RSS (the daemon's: the submitter and the sink live elsewhere)."""
    spawn = multiprocessing.get_context("spawn")
    ready = spawn.Event()
    submitter = spawn.Process(
        target=_submit_at_pace,
        args=(config, url, steps, sagas_per_s, seconds, ready),
        daemon=True,
    )
    executors = {name: executor_for(name, dest) for name, dest in config.destinations.items()}
    daemon = Daemon(config, url, executors=executors)
    task = asyncio.create_task(daemon.run())
    try:
        while not daemon.started and not task.done():
            await asyncio.sleep(0.01)
        submitter.start()
        if not await asyncio.to_thread(ready.wait, 60):
            raise RuntimeError("the soak's submitter process did not start within 60 s")
        succeeded_before = await asyncio.to_thread(_scalar, url, "bench_succeeded_steps")
        started = last_progress = time.perf_counter()
        rss = [_rss_mb()]
        interval = min(SOAK_SAMPLE_S, max(seconds / 10, 0.5))
        while submitter.is_alive() and not task.done():
            await asyncio.to_thread(submitter.join, interval)
            rss.append(_rss_mb())
            if time.perf_counter() - last_progress >= SOAK_PROGRESS_S:
                last_progress = time.perf_counter()
                progress(
                    f"soak: {last_progress - started:.0f}/{seconds:.0f} s, RSS {rss[-1]:.1f} MB"
                )
        elapsed = time.perf_counter() - started
        if submitter.exitcode not in (0, None):
            raise RuntimeError(f"the soak's submitter process failed ({submitter.exitcode})")
        succeeded = await asyncio.to_thread(_scalar, url, "bench_succeeded_steps")
        running = await asyncio.to_thread(_scalar, url, "bench_running_sagas")
    finally:
        if submitter.is_alive():
            submitter.terminate()
        daemon.stopping.set()
        await task
        for executor in executors.values():
            await executor.aclose()
    return Soak(elapsed, succeeded - succeeded_before, running, rss)


def _submit_at_pace(
    config: Config, url: str, steps: int, sagas_per_s: float, seconds: float, ready: Any
) -> None:
    """The soak's submitter (its own process): keeps the submitted count at ``sagas_per_s``
    times the elapsed time, committing what is due every few milliseconds (at most 100)."""
    client = Client(config, database_url=url)
    plan = ensure_checked(_plan(steps), client.registry)
    submitted = 0
    with psycopg.connect(url) as conn:
        ready.set()
        started = time.monotonic()
        while (elapsed := time.monotonic() - started) < seconds:
            for _ in range(min(int(elapsed * sagas_per_s) - submitted, 100)):
                client.submit(plan, execution_id=f"soak-{submitted}", conn=conn)
                submitted += 1
            conn.commit()
            time.sleep(0.01)


async def _with_executors(config: Config, run: Any) -> Any:
    """Run ``run(executors)`` with one executor per destination, by its configured transport,
    made in the running loop and closed afterwards."""
    executors = {name: executor_for(name, dest) for name, dest in config.destinations.items()}
    try:
        return await run(executors)
    finally:
        for executor in executors.values():
            await executor.aclose()


async def _bare_calls_per_s(config: Config, concurrency: int, seconds: float = 2.0) -> float:
    """Calls/s of the bare executor against the sink: ``concurrency`` callers, no database."""
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
        timeout=10.0,
    )

    async def loop(executors: Mapping[str, Executor]) -> float:
        executor = executors["sink"]
        for _ in range(concurrency * 20):  # warm up: connections, caches
            await _checked(executor.call(inv))
        calls = 0
        stop = time.perf_counter() + seconds

        async def caller() -> None:
            nonlocal calls
            while time.perf_counter() < stop:
                await _checked(executor.call(inv))
                calls += 1

        started = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(concurrency)))
        return calls / (time.perf_counter() - started)

    rate: float = await _with_executors(config, loop)
    return rate


async def _checked(call: Any) -> None:
    result = await call
    if result.outcome is not OutcomeClass.SUCCESS:
        raise RuntimeError(f"bench sink call failed: {result.error}")


def _rss_mb() -> float:
    """Current resident set of this process (VmRSS), else its peak (ru_maxrss, in KiB)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def _idle_latency(config: Config, url: str, samples: int) -> list[float]:
    """Submit one saga at a time to an idle, running daemon: time from its outbox row's
    insert to its write-ahead (sent_at). The submitter is its own process, so waiting for each
    saga does not take the daemon's interpreter lock."""
    spawn = multiprocessing.get_context("spawn")
    submitter = spawn.Process(target=_submit_one_at_a_time, args=(config, url, samples))
    executors = {name: executor_for(name, dest) for name, dest in config.destinations.items()}
    daemon = Daemon(config, url, executors=executors)
    task = asyncio.create_task(daemon.run())
    try:
        while not daemon.listening and not task.done():
            await asyncio.sleep(0.01)
        submitter.start()
        await asyncio.to_thread(submitter.join, 120)
        if submitter.exitcode != 0:
            raise RuntimeError(f"the idle-latency submitter failed ({submitter.exitcode})")
    finally:
        if submitter.is_alive():
            submitter.terminate()
        daemon.stopping.set()
        await task
        for executor in executors.values():
            await executor.aclose()
    return _latencies(url, "bench_idle_latencies")


def _submit_one_at_a_time(config: Config, url: str, samples: int) -> None:
    """The idle-latency submitter (its own process): the next saga once the last was sent."""
    client = Client(config, database_url=url)
    plan = ensure_checked(_plan(1), client.registry)
    with psycopg.connect(url, autocommit=True) as conn:
        for index in range(samples):
            saga = client.submit(plan, execution_id=f"idle-{index}")
            while not conn.execute(sql("bench_sent"), {"saga_id": saga.saga_id}).fetchone():
                time.sleep(0.002)
            time.sleep(0.02)  # idle again: nothing in flight, nothing queued


def _settled_commits(url: str, patience_s: float = 10.0) -> int:
    """xact_commit once the daemon's sessions have gone: a backend reports its counts at most
    once a second while it lives, and always when it exits."""
    give_up = time.monotonic() + patience_s
    while _scalar(url, "bench_other_backends") and time.monotonic() < give_up:
        time.sleep(0.05)
    return _scalar(url, "bench_commits")


def _latencies(url: str, query: str = "bench_latencies") -> list[float]:
    with psycopg.connect(url) as conn:
        return [float(row[0]) for row in conn.execute(sql(query)).fetchall()]


def _scalar(url: str, query: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(sql(query)).fetchone()
    assert row is not None
    return int(row[0])


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def format_result(result: BenchResult) -> str:
    rows = {key: value for key, value in asdict(result).items() if value is not None}
    width = max(len(key) for key in rows)
    return "\n".join(f"{key:<{width}}  {value}" for key, value in rows.items())

"""What the bench's parts share: the plan, scratch databases, small readings."""

from __future__ import annotations

import asyncio
import os
import resource
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg

from effectusd.config import Config
from effectusd.core.states import OutcomeClass
from effectusd.dispatcher.daemon import Daemon
from effectusd.executors.factory import executor_for
from effectusd.store.postgres.queries import sql


@asynccontextmanager
async def daemon_with_submitter(
    config: Config, url: str, submitter: Any
) -> AsyncIterator[asyncio.Task[int]]:
    """A daemon running in this process (executors made in this loop) and, once it listens,
    ``submitter`` (a process) started; on the way out the submitter is ended, the daemon
    drained and its executors closed. Yields the daemon's task."""
    executors = {name: executor_for(name, dest) for name, dest in config.destinations.items()}
    daemon = Daemon(config, url, executors=executors)
    task = asyncio.create_task(daemon.run())
    try:
        while not (daemon.started and daemon.listening) and not task.done():
            await asyncio.sleep(0.01)
        submitter.start()
        yield task
    finally:
        if submitter.is_alive():
            submitter.terminate()
        daemon.stopping.set()
        await task
        for executor in executors.values():
            await executor.aclose()


def bench_plan(steps: int) -> dict[str, Any]:
    return {
        "plan_id": f"bench-{steps}",
        "steps": [
            {"id": f"s{i}", "verb": "sink.noop", "args": {"i": i}, "compensate": "none"}
            for i in range(steps)
        ],
    }


def percentile(values: list[float], pct: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def scratch_database(server_url: str) -> str:
    name = f"effectusd_bench_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return psycopg.conninfo.make_conninfo(server_url, dbname=name)


def drop_database(server_url: str, url: str) -> None:
    name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def with_executors(config: Config, run: Any) -> Any:
    """Run ``run(executors)`` with one executor per destination, by its configured transport,
    made in the running loop and closed afterwards."""
    executors = {name: executor_for(name, dest) for name, dest in config.destinations.items()}
    try:
        return await run(executors)
    finally:
        for executor in executors.values():
            await executor.aclose()


async def checked(call: Any) -> None:
    result = await call
    if result.outcome is not OutcomeClass.SUCCESS:
        raise RuntimeError(f"bench sink call failed: {result.error}")


def daemon_rss_mb() -> float:
    """Current resident set of this process (VmRSS), else its peak (ru_maxrss, in KiB)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def read_latencies(url: str, query: str = "bench_latencies") -> list[float]:
    with psycopg.connect(url) as conn:
        return [float(row[0]) for row in conn.execute(sql(query)).fetchall()]


def scalar(url: str, query: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(sql(query)).fetchone()
    assert row is not None
    return int(row[0])


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])

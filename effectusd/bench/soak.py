"""The soak: submissions at the measured pace from another process, the daemon's resident set
sampled."""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from dataclasses import dataclass
from typing import Any

from effectusd.backends.postgres import connect
from effectusd.bench.database import scalar
from effectusd.bench.harness import bench_plan, daemon_with_submitter
from effectusd.bench.measures import daemon_rss_mb
from effectusd.client import Client
from effectusd.config import Config
from effectusd.core.submission import ensure_checked

SOAK_SAMPLE_S = 5.0
SOAK_PROGRESS_S = 30.0


@dataclass
class Soak:
    seconds: float
    steps: int  # steps that succeeded during the soak
    running_end: int
    rss_mb: list[float]


async def run_soak(
    config: Config, url: str, steps: int, sagas_per_s: float, seconds: float, progress: Any
) -> Soak:
    """Run the daemon while another process submits ``sagas_per_s`` for ``seconds``; sample
    this process's RSS (the daemon's: the submitter and the sink live elsewhere)."""
    spawn = multiprocessing.get_context("spawn")
    ready = spawn.Event()
    submitter = spawn.Process(
        target=submit_at_pace,
        args=(config, url, steps, sagas_per_s, seconds, ready),
        daemon=True,
    )
    async with daemon_with_submitter(config, url, submitter) as task:
        if not await asyncio.to_thread(ready.wait, 60):
            raise RuntimeError("the soak's submitter process did not start within 60 s")
        succeeded_before = await asyncio.to_thread(scalar, url, "succeeded_steps")
        started = last_progress = time.perf_counter()
        rss = [daemon_rss_mb()]
        interval = min(SOAK_SAMPLE_S, max(seconds / 10, 0.5))
        while submitter.is_alive() and not task.done():
            await asyncio.to_thread(submitter.join, interval)
            rss.append(daemon_rss_mb())
            if time.perf_counter() - last_progress >= SOAK_PROGRESS_S:
                last_progress = time.perf_counter()
                progress(
                    f"soak: {last_progress - started:.0f}/{seconds:.0f} s, RSS {rss[-1]:.1f} MB"
                )
        elapsed = time.perf_counter() - started
        if submitter.exitcode not in (0, None):
            raise RuntimeError(f"the soak's submitter process failed ({submitter.exitcode})")
        succeeded = await asyncio.to_thread(scalar, url, "succeeded_steps")
        running = await asyncio.to_thread(scalar, url, "running_sagas")
    return Soak(elapsed, succeeded - succeeded_before, running, rss)


def submit_at_pace(
    config: Config, url: str, steps: int, sagas_per_s: float, seconds: float, ready: Any
) -> None:
    """The soak's submitter (its own process): keeps the submitted count at ``sagas_per_s``
    times the elapsed time, committing what is due every few milliseconds (at most 100)."""
    client = Client(config, database_url=url)
    plan = ensure_checked(bench_plan(steps), client.registry)
    submitted = 0
    with connect(url, autocommit=False) as conn:
        ready.set()
        started = time.monotonic()
        while (elapsed := time.monotonic() - started) < seconds:
            for _ in range(min(int(elapsed * sagas_per_s) - submitted, 100)):
                client.submit(plan, execution_id=f"soak-{submitted}", conn=conn)
                submitted += 1
            conn.commit()
            time.sleep(0.01)

"""The pipeline the bench drives: its plan, a daemon in this process, executors per
destination, the sink's port."""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

from effectusd.bench.fleet import is_listening, serving
from effectusd.bench.measures import process_cpu_seconds
from effectusd.bench.sink import serve_noop
from effectusd.config import Config
from effectusd.core.states import OutcomeClass
from effectusd.core.stores import Store
from effectusd.executors.factory import executor_for

# The canonical arguments of the bench plan's first step, byte for byte: what the peers POST.
BODY = b'{"i":0}'


@asynccontextmanager
async def daemon_with_submitter(
    config: Config, url: str, submitter: Any, stores: Sequence[Store] | None = None
) -> AsyncIterator[asyncio.Task[int]]:
    """A daemon running in this process (executors made in this loop), serving ``url`` or
    every one of ``stores``, and, once it listens, ``submitter`` (a process) started; on the
    way out the submitter is ended, the daemon drained and its executors closed. Yields the
    daemon's task."""
    executors = {name: executor_for(name, dest) for name, dest in config.destinations.items()}
    daemon = serving(config, stores or [Store(None, url, config.namespace)], executors)
    task = asyncio.create_task(daemon.run())
    try:
        while not is_listening(daemon) and not task.done():
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


def bench_plan(steps: int) -> dict[str, Any]:
    return {
        "plan_id": f"bench-{steps}",
        "steps": [
            {"id": f"s{i}", "verb": "sink.noop", "args": {"i": i}, "compensate": "none"}
            for i in range(steps)
        ],
    }


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Sink:
    """The bench's no-op sink, running: its base URL and its process, whose CPU the benches
    read around a drain (what answering that drain's requests cost)."""

    url: str
    pid: int

    def cpu_seconds(self) -> float | None:
        return process_cpu_seconds(self.pid)


def sink_cpu_used(sink: Sink | None, before: float | None) -> float | None:
    """The sink's CPU seconds since ``before`` (its reading at the start), None if either
    reading is missing."""
    after = None if sink is None else sink.cpu_seconds()
    return None if after is None or before is None else after - before


@contextmanager
def start_sink() -> Iterator[Sink]:
    """The no-op sink in a process of its own (so it never shares the measured interpreter)."""
    port = free_port()
    spawn = multiprocessing.get_context("spawn")
    ready = spawn.Event()
    sink = spawn.Process(target=serve_noop, args=(port, ready), daemon=True)
    sink.start()
    try:
        if not ready.wait(30):
            raise RuntimeError(f"the bench's no-op destination did not start on port {port}")
        assert sink.pid is not None  # started
        yield Sink(f"http://127.0.0.1:{port}", sink.pid)
    finally:
        sink.terminate()
        sink.join(5)

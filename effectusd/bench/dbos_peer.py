"""DBOS Transact as a peer of ``make bench-peers``: durable workflows of five steps, each step one
aiohttp POST of the bench's body to the same no-op sink, on their own scratch database.

The workflows are enqueued on a DBOS queue before the clock starts, by a DBOS instance that
listens to no queue of ours; the drain is a second instance, launched on the clock, that dequeues
them with the queue's worker concurrency (the bench's concurrency) as its calls in flight, and
a system-database pool that fits them. DBOS polls its queues (no notification wakes a worker):
every ``POLL_S`` here, against its default of a second, which would leave most slots idle
between polls (a workflow of five calls takes well under a second); 0.01 s was no faster in
one pair of runs here, and each poll costs the process a few statements. A workflow and each
of its steps are checkpointed in DBOS's system database, the step's output included, which is
what makes them durable: that is the work measured per step. The clock runs from the launch
of the draining instance (its start-up included, as pgqueuer's run includes its own) until
every workflow is recorded a success.

Needs the ``peers`` extra (``dbos``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from effectusd.backends.postgres import connection_keywords, database_name
from effectusd.bench.database import drop_database, scalar, scratch_database, settled_scalar
from effectusd.bench.harness import BODY
from effectusd.bench.measures import DatabaseCpu, PeerResult

QUEUE = "effectusd_bench"
STEPS = 5
POLL_S = 0.05


class _Drain:
    """What the workflows of the running drain share: its aiohttp session (made on its loop)
    and the count of workflows still to finish."""

    session: Any = None
    left = 0
    finished: asyncio.Event | None = None

    @classmethod
    def one_finished(cls) -> None:
        cls.left -= 1
        if cls.left == 0 and cls.finished is not None:
            cls.finished.set()


_WORKFLOW: list[Any] = []  # the registered workflow, once


def _register() -> Any:
    """The workflow and its step, registered with DBOS's (process-wide) registry once."""
    from dbos import DBOS

    if _WORKFLOW:
        return _WORKFLOW[0]

    # Registered by calling DBOS's decorators rather than decorating: typed or not (without
    # the peers extra, mypy sees them as Any), the functions keep their own types.
    async def post_once(sink: str) -> int:
        async with _Drain.session.post(
            f"{sink}/noop", data=BODY, headers={"Content-Type": "application/json"}
        ) as reply:
            await reply.read()
            reply.raise_for_status()
            status: int = reply.status
            return status

    post = DBOS.step(name="post")(post_once)

    async def run_five(sink: str) -> int:
        try:
            for _ in range(STEPS):
                await post(sink)
        finally:
            _Drain.one_finished()  # a failed workflow ends the drain's wait too
        return STEPS

    five_posts = DBOS.workflow(name="five_posts")(run_five)
    _WORKFLOW.append(five_posts)
    return five_posts


def _config(url: str, concurrency: int) -> Any:
    from sqlalchemy.engine import URL

    keywords = connection_keywords(url)  # DBOS takes a URL; the bench's scratch one is conninfo
    port = keywords.pop("port", None)
    system_database = URL.create(
        "postgresql",
        username=keywords.pop("user", None),
        password=keywords.pop("password", None),
        host=keywords.pop("host", None),
        port=None if port is None else int(port),
        database=keywords.pop("database", None),
        query=keywords,
    )
    return {
        "name": "effectusd-bench-peer",
        "system_database_url": system_database.render_as_string(hide_password=False),
        "log_level": "WARNING",
        # room for every workflow in flight to checkpoint at once, beside its queue poller
        "sys_db_pool_size": concurrency + 4,
    }


def _enqueue(url: str, sink: str, workflows: int, concurrency: int) -> None:
    """The backlog: ``workflows`` enqueued by an instance that dequeues none of them."""
    from dbos import DBOS

    workflow = _register()
    DBOS(config=_config(url, concurrency))
    DBOS.listen_queues([])
    DBOS.launch()
    try:
        queue = DBOS.register_queue(
            QUEUE, worker_concurrency=concurrency, polling_interval_sec=POLL_S
        )
        for _ in range(workflows):
            queue.enqueue(workflow, sink)
    finally:
        DBOS.destroy()


async def _drain(url: str, workflows: int, concurrency: int) -> tuple[float, float, float | None]:
    """Seconds, CPU seconds of this process and of the database's backends, from the launch
    of an instance that listens to the queue until every workflow has ended; all must succeed."""
    import aiohttp
    from dbos import DBOS

    _register()
    _Drain.finished, _Drain.left = asyncio.Event(), workflows
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        _Drain.session = session
        DBOS(config=_config(url, concurrency))
        try:
            with DatabaseCpu(database_name(url)) as database_cpu:
                started, cpu_started = time.perf_counter(), time.process_time()
                DBOS.launch()  # in this loop's thread: DBOS runs the workflows on this loop
                await _Drain.finished.wait()
                # Every workflow has returned; its status is written after it returns.
                while await asyncio.to_thread(scalar, url, "dbos_ended") < workflows:
                    await asyncio.sleep(0.005)
                seconds = time.perf_counter() - started
                cpu = time.process_time() - cpu_started
        finally:
            DBOS.destroy()
            _Drain.session = None
    succeeded = scalar(url, "dbos_succeeded")
    if succeeded != workflows:
        raise RuntimeError(
            f"DBOS completed {succeeded} of {workflows} workflow(s): the run is not comparable"
        )
    return seconds, cpu, database_cpu.seconds


def run_dbos(server_url: str, sink: str, workflows: int, concurrency: int) -> PeerResult:
    """``workflows`` five-step DBOS workflows drained from a queue at ``concurrency``, in a
    scratch database (dropped afterwards); the unit of the result is a step."""
    url = scratch_database(server_url)
    try:
        _enqueue(url, sink, workflows, concurrency)
        rows_before = settled_scalar(url, "rows_written")
        wal_before = scalar(url, "wal_position")
        seconds, cpu, db_cpu = asyncio.run(_drain(url, workflows, concurrency))
        wal_bytes = scalar(url, "wal_position") - wal_before
        rows_written = settled_scalar(url, "rows_written") - rows_before
    finally:
        drop_database(server_url, url)
    return PeerResult.of(
        workflows * STEPS, concurrency, seconds, cpu, db_cpu, wal_bytes, rows_written
    )

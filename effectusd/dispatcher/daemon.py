"""The daemon's lifecycle around the pipeline: connections, wake-ups, idling and shutdown."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from effectusd.backends.errors import DATABASE_ERRORS, LISTEN_LOST, failure_name
from effectusd.config import Config, ConfigError
from effectusd.core.replication import REFUSED_SERVERS
from effectusd.dispatcher.assembly import (
    configured_capacity,
    destination_executors,
    fencing_provider,
    new_owner_id,
)
from effectusd.dispatcher.capacity import Capacity
from effectusd.dispatcher.heap import settle_heap
from effectusd.dispatcher.loops import Loop, Round
from effectusd.dispatcher.metrics import Metrics
from effectusd.dispatcher.observability import ObservabilityServer
from effectusd.dispatcher.pipeline import Pipeline
from effectusd.dispatcher.probes import Prober
from effectusd.dispatcher.signals import install_stop_signals
from effectusd.executors.protocol import Executor
from effectusd.fencing.authority import AuthorityFencing, authority_current
from effectusd.store.dialects import open_dispatch_store
from effectusd.store.dispatch import DispatchStore
from effectusd.store.sql import store_backend
from effectusd.tracing import AttemptTracer
from effectusd.web import Install

# Routes beside /metrics and /healthz, given the daemon's attempt outcome counts: how the
# command line adds the operator console without the dispatcher knowing it.
WebExtension = Callable[[Callable[[], Mapping[str, int]]], Install]

log = logging.getLogger("effectusd.daemon")

RECLAIM_INTERVAL_S = 1.0
SAMPLE_INTERVAL_S = 5.0
IDLE_HORIZON_S = 2.0  # --until-idle waits for retries due within this long
LOOP_STOP_S = 1.0  # a claim round under way when a stop is asked for
CLOSE_BOUND_S = 5.0  # closing pools, executors and the HTTP server after a drain
RECORD_DRAIN_S = 5.0  # recording what the drained calls returned, past the grace period
_HEALTH_ERRORS: tuple[type[BaseException], ...] = (TimeoutError, *DATABASE_ERRORS)


@dataclass
class _Opened:
    """What ``Daemon.run`` has opened so far, for closing on the way out."""

    executors: Mapping[str, Executor]
    store: DispatchStore | None = None
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    server: ObservabilityServer | None = None


async def _close_within(store: DispatchStore, bound_s: float) -> None:
    """Close ``store`` (its pool stops its workers); give up waiting after ``bound_s``."""
    try:
        async with asyncio.timeout(bound_s):
            await store.close()
    except TimeoutError:
        log.warning("closing the store took over %.0fs; exiting anyway", bound_s)


class Daemon:
    def __init__(
        self,
        config: Config,
        database_url: str,
        *,
        executors: Mapping[str, Executor] | None = None,
        owner: str | None = None,
        tracer_provider: object | None = None,
        web: WebExtension | None = None,
        store_label: str | None = None,
    ) -> None:
        """``tracer_provider``: an OpenTelemetry TracerProvider for the attempt spans; by
        default the global one, and tracing stays off while none is set. ``web``: more
        routes on the observability port (the console, composed by `effectusd run`).
        ``store_label``: the label of the store served, among several (the fencing authority
        names its holders by it, and fills ``{store}`` in resources with it)."""
        self.config = config
        self.tracer_provider = tracer_provider
        self.database_url = database_url
        self.store_label = store_label
        self.owner = owner or new_owner_id()
        self.registry = config.registry()
        self._executors = executors
        self._web = web
        self._extra_routes: list[Install] = []
        self.stopping = asyncio.Event()
        self.wake = asyncio.Event()
        self.listening = False
        self.started = False
        self.pipeline: Pipeline | None = None
        self.metrics = Metrics()
        self.http_port: int | None = None  # the bound port, once the endpoints are up
        self.backend = store_backend(database_url)
        self.replication = self.backend.runner.watch_replication(
            require_synchronous=config.database.require_synchronous_replication
        )
        self._store: DispatchStore | None = None
        self._background: list[asyncio.Task[Any]] = []
        self.claimer: Loop | None = None
        self.prober: Prober | None = None
        # One store of several (effectusd.dispatcher.fleet): the fleet's slots, the store's
        # namespace (its rows alone are claimed); the fleet's stop signals and warnings.
        self.capacity: Capacity | None = None
        self.namespace: str | None = None
        self.fleet_part = False

    def check_startup(self) -> None:
        """Refuse to run on a schema we do not match, with test-only fencing in a real setup,
        or with extra routes (a console) nobody may use safely, before touching anything
        else; and say what the configuration allows but should change."""
        fencing_provider(self.config)
        if self.config.fencing.url is not None:
            authority_current(self.config.fencing.url)
        for warning in [] if self.fleet_part else self.config.warnings():
            log.warning("%s", warning)
        serving = self.config.observability.http_port is not None
        if self._web is not None and serving:
            self._extra_routes = [self._web(self.metrics.outcome_totals)]
        with self.backend.runner.connect() as conn:
            self.backend.migrator.require_current(conn)
            if self.replication is not None:
                try:
                    self.replication.connected_sync(conn)
                except REFUSED_SERVERS as exc:
                    raise ConfigError(str(exc)) from exc

    async def _open_store(self) -> DispatchStore:
        database = self.config.database
        fencing = fencing_provider(self.config, self.store_label, self.owner)
        store = await open_dispatch_store(
            self.backend,
            self.registry,
            self.owner,
            self.config.dispatcher.lease_margin.total_seconds(),
            fencing,
            (database.pool_min_size, database.pool_max_size),
            self.namespace,
        )
        if isinstance(fencing, AuthorityFencing):  # its counters go to the authority first
            fencing.own_counters = store.fencing_counters
        return store

    async def run(self, until_idle: bool = False, *, checked: bool = False) -> int:
        """Start, claim until stopped (or idle), drain, stop. A start that fails after
        opening something (the store, the loops) closes it all again before raising.
        ``checked``: ``check_startup`` has passed already."""
        if not checked:
            self.check_startup()
        opened = _Opened(executors=self._executors or destination_executors(self.config))
        try:
            store = self._store = opened.store = await self._open_store()
            pipeline = self.pipeline = self._pipeline(store, opened.executors)
            settle_heap()
            opened.tasks = self._background = [
                loop.start() for loop in self._loops(pipeline, store)
            ]
            opened.server = await self._serve()
            self.started = True
            if not self.fleet_part:
                install_stop_signals(self.stopping)
            log.info("daemon %s started (%d destination(s))", self.owner, len(opened.executors))
            await self._claim_until_stopped(pipeline, store, until_idle)
            await self._drain(pipeline)
        finally:
            was_started, self.started = self.started, False
            await self._close(opened, own_executors=self._executors is None)
            if was_started:
                log.info("daemon %s stopped", self.owner)
        return 0

    def _pipeline(self, store: DispatchStore, executors: Mapping[str, Executor]) -> Pipeline:
        settings = self.config.dispatcher
        capacity = self.capacity or configured_capacity(self.config, self.registry)
        return Pipeline(
            store,
            executors,
            self.registry,
            capacity,
            self.wake,
            self.metrics,
            claim_batch=settings.batch_size,
            tracer=AttemptTracer.configured(self.tracer_provider),
        )

    async def _serve(self) -> ObservabilityServer | None:
        """The observability endpoints (and the routes added beside them), if configured; an
        OSError if the port cannot be listened on."""
        observability = self.config.observability
        if observability.http_port is None:
            return None
        server = ObservabilityServer(self.metrics, self._healthy, self._ready, self._extra_routes)
        self.http_port = await server.start(observability.http_host, observability.http_port)
        log.info("serving /healthz and /readyz on port %d", self.http_port)
        return server

    async def _close(self, opened: _Opened, *, own_executors: bool) -> None:
        """Close what ``run`` opened within CLOSE_BOUND_S whatever is stuck; the store last,
        under a bound of its own, so that it is closed whatever happened before: a pool left
        open holds the process forever (a worker caught connecting swallows the cancellation
        that ends the event loop, and waits for work that never comes)."""
        for task in opened.tasks:
            task.cancel()
        if self.pipeline is not None:
            self.pipeline.spans.close()
        try:
            async with asyncio.timeout(CLOSE_BOUND_S):
                await asyncio.gather(*opened.tasks, return_exceptions=True)
                if opened.server is not None:
                    await opened.server.close()
                if own_executors:
                    for executor in opened.executors.values():
                        await executor.aclose()
        except TimeoutError:
            log.warning("closing connections took over %.0fs; exiting anyway", CLOSE_BOUND_S)
        if opened.store is not None:
            await _close_within(opened.store, CLOSE_BOUND_S)

    def _loops(self, pipeline: Pipeline, store: DispatchStore) -> list[Loop]:
        """The background actors beside the claimer."""
        loops = [
            Loop("recorder", pipeline.recorder.round, self.metrics),
            Loop("reclaimer", self._reclaim_round(pipeline), self.metrics),
            Loop("sampler", self._sample_round(store), self.metrics),
        ]
        if self.backend.notifications.notifies:  # else (SQLite) the claimer polls
            loops.append(Loop("listener", self._listen_round, self.metrics))
        # with no verb probed, the prober only closes the probes of a removed probe config
        prober = self.prober = Prober(
            self.config, store.session, pipeline.executors, self.metrics, on_settled=self.wake.set
        )
        loops.append(Loop("prober", prober.round, self.metrics, prober.sleep))
        return loops

    async def _claim_until_stopped(
        self, pipeline: Pipeline, store: DispatchStore, until_idle: bool
    ) -> None:
        """Run the claim loop until it ends (idle) or a stop is asked for. The loop notices a
        stop between rounds; one stuck in the database is not waited on past LOOP_STOP_S."""
        self.claimer = Loop(
            "claimer", self._claim_round(pipeline, store, until_idle), self.metrics, self._sleep
        )
        claimer = self.claimer.start()
        stop = asyncio.create_task(self.stopping.wait())
        try:
            await asyncio.wait({claimer, stop}, return_when=asyncio.FIRST_COMPLETED)
            if not claimer.done():
                await asyncio.wait({claimer}, timeout=LOOP_STOP_S)
            if not claimer.done():
                log.warning("the claim loop is stuck in the database; stopping it")
                claimer.cancel()
                await asyncio.gather(claimer, return_exceptions=True)
            elif not claimer.cancelled() and (error := claimer.exception()) is not None:
                raise error
        finally:
            stop.cancel()
            if not claimer.done():
                claimer.cancel()

    def _claim_round(self, pipeline: Pipeline, store: DispatchStore, until_idle: bool) -> Round:
        poll = self.config.dispatcher.poll_seconds(self.backend.notifications.poll_interval_s)
        destinations = list(self.config.destinations)

        async def claim_round() -> float | None:
            """Claim what fits; else say how long nothing can be due (None: idle, done)."""
            if self.stopping.is_set():
                return None
            self.wake.clear()  # before claiming: a wake-up during the claim is not lost
            if await pipeline.claim_once():
                return 0.0
            if until_idle and pipeline.idle:
                in_flight, due_soon = await store.outbox_counts(IDLE_HORIZON_S)
                if in_flight == 0 and due_soon == 0 and pipeline.idle:
                    probes = await self._probes_idle()
                    if probes is not None:
                        log.info("idle: nothing queued, in flight or due soon%s", probes)
                        return None
            wait = poll
            if pipeline.free():  # a full pipeline is woken by its calls, or by its recorder
                due_in = await store.seconds_until_due(destinations)
                if due_in is not None:
                    wait = min(wait, max(due_in, 0.001))
            return wait

        return claim_round

    async def _probes_idle(self) -> str | None:
        """For --until-idle: None while a probe is due or in flight (the due ones are taken
        now), else what is left (the probes scheduled later, as the exit line's tail)."""
        prober = self.prober
        if prober is None or not prober.probes:  # orphaned probes are closed, not waited for
            return ""
        await prober.take()
        if prober.in_flight:
            return None
        pending = await prober.pending()
        if pending.due or pending.unscheduled:
            return None
        if not pending.later or pending.next_at is None or pending.db_now is None:
            return "; no probe scheduled"
        due_in = (pending.next_at - pending.db_now).total_seconds()
        return (
            f"; {pending.later} probe(s) scheduled later, the next at "
            f"{pending.next_at.isoformat(timespec='seconds')} (in {due_in:.0f}s)"
        )

    @staticmethod
    def _reclaim_round(pipeline: Pipeline) -> Round:
        async def reclaim_round() -> float:
            await pipeline.reclaim_once()
            return RECLAIM_INTERVAL_S

        return reclaim_round

    async def _sleep(self, seconds: float) -> None:
        waiters = [
            asyncio.ensure_future(self.wake.wait()),
            asyncio.ensure_future(self.stopping.wait()),
        ]
        try:
            await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    async def _drain(self, pipeline: Pipeline) -> None:
        """Stop claiming; let in-flight calls and probes finish within the grace period; record
        them. Bounded whatever is stuck: what is not recorded by then is left to its lease,
        whose reclaim by the next daemon settles it from what the database says (a probe, to
        its hold: it is asked again after it)."""
        pipeline.claiming = False  # the recorder claims nothing more either
        grace = self.config.dispatcher.shutdown_grace.total_seconds()
        deadline = time.monotonic() + grace
        try:
            await self._drain_calls(pipeline, deadline)
        finally:
            await self._drain_probes(deadline)

    async def _drain_probes(self, deadline: float) -> None:
        """Take no more probes; wait for those in flight until ``deadline``."""
        if self.prober is None:
            return
        for task in self._background:
            if task.get_name() == "prober":
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if self.prober.in_flight:
            log.info("waiting for %d probe(s) in flight", self.prober.in_flight)
        await self.prober.drain(max(deadline - time.monotonic(), 0.0))

    async def _drain_calls(self, pipeline: Pipeline, deadline: float) -> None:
        grace = self.config.dispatcher.shutdown_grace.total_seconds()
        if pipeline.calls:
            log.info("draining %d in-flight batch(es) for up to %.0fs", len(pipeline.calls), grace)
        while True:  # a record that claimed before the stop starts those calls: drain them too
            if pipeline.calls:
                _done, pending = await asyncio.wait(
                    list(pipeline.calls), timeout=max(deadline - time.monotonic(), 0.0)
                )
                for task in pending:
                    task.cancel()  # their leases expire; the next daemon settles them
            if not await self._record_drained(pipeline, deadline) or not pipeline.calls:
                return

    @staticmethod
    async def _record_drained(pipeline: Pipeline, deadline: float) -> bool:
        """Wait until every outcome in hand is recorded (False: not by the deadline)."""
        recording = max(deadline - time.monotonic(), 0.0) + RECORD_DRAIN_S
        try:
            async with asyncio.timeout(recording):
                await pipeline.recorder.join()
        except TimeoutError:
            log.warning(
                "%d outcome(s) still unrecorded after the grace period; leaving them to "
                "the reclaim",
                pipeline.recorder.waiting,
            )
            return False
        return True

    def _sample_round(self, store: DispatchStore) -> Round:
        seen: set[str] = set()

        async def sample_round() -> float:
            """Queue depth, oldest due age and live sagas by state, for the gauges."""
            sample = await store.sample()
            self.metrics.ready_depth.set(sample.ready_depth)
            self.metrics.oldest_ready_age.set(sample.oldest_ready_s)
            for state in seen | set(sample.sagas):
                self.metrics.sagas.labels(state).set(sample.sagas.get(state, 0))
            seen.update(sample.sagas)
            return SAMPLE_INTERVAL_S

        return sample_round

    async def _healthy(self) -> tuple[bool, dict[str, object]]:
        """The process answers, the database does, and the daemon's work moves: no loop has
        died, no outcome waits unrecorded and no write has failed for ``unhealthy_after``."""
        if self._store is None:
            return False, {"database": "not connected"}
        try:
            async with asyncio.timeout(2):
                await self._store.ping()
        except _HEALTH_ERRORS as exc:
            return False, {"database": type(exc).__name__}
        problems = self.stuck()
        if problems:
            return False, {"database": "ok", "stuck": problems}
        return True, {"database": "ok"}

    def stuck(self) -> list[str]:
        """What keeps this daemon from making progress, if anything (for /healthz)."""
        bound = self.config.observability.unhealthy_after.total_seconds()
        now = time.monotonic()
        problems = [
            f"{task.get_name()} loop died"
            for task in self._background
            if task.done() and not task.cancelled()
        ]
        if self.claimer is not None and self.claimer.failing_for(now) > bound:
            problems.append(f"claims failing for {self.claimer.failing_for(now):.0f}s")
        pipeline = self.pipeline
        if pipeline is not None:
            since = pipeline.recorder.recording_since
            if since is not None and now - since > bound:
                problems.append(f"outcomes waiting to be recorded for {now - since:.0f}s")
            failing = pipeline.recorder.failing_since
            if failing is not None and now - failing > bound:
                problems.append(f"the store refusing outcome writes for {now - failing:.0f}s")
        return problems

    async def _ready(self) -> tuple[bool, dict[str, object]]:
        """Claiming work: started, not draining, database reachable."""
        healthy, detail = await self._healthy()
        ready = healthy and self.started and not self.stopping.is_set()
        fencing = (await self._store.fencing.readiness()) if self._store is not None else None
        if fencing is not None:  # the fencing authority: fenced work waits while it is down
            ready = ready and fencing[0]
            detail = {**detail, "fencing_authority": fencing[1]}
        return ready, {
            **detail,
            "started": self.started,
            "draining": self.stopping.is_set(),
            "notifications": "listening" if self.listening else "polling",
            "store": self.backend.dialect,
            **({} if self.replication is None else {"replication": self.replication.report()}),
            **({"warnings": warnings} if (warnings := self.config.warnings()) else {}),
        }

    async def _listen_round(self) -> float:
        """Wake the claimer on every notification, until the connection is lost. A connection
        that cannot be opened fails the round (the loop backs off); one lost after it worked
        is opened again at once. Meanwhile the claimer polls."""
        wakeups = self.backend.notifications.wakeups()
        try:
            async for _ in wakeups:
                # The first comes once listening: notifications may have been missed meanwhile.
                self.listening = True
                self.wake.set()
        except LISTEN_LOST as exc:
            if not self.listening:
                raise
            log.warning("LISTEN connection lost (%s); polling until it heals", failure_name(exc))
        finally:
            self.listening = False
            await wakeups.aclose()
        return 0.1

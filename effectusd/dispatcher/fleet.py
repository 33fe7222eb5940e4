"""One daemon serving several stores (``[database.stores]``, docs/design.md section 10).

Each store is served by a ``Daemon`` of its own in this process: its own pool, claim, reclaim,
recorder and listener loops, backoffs and bound on unrecorded outcomes, claiming only its
namespace's rows. They share what is the process's: the executors (a destination is one
service whatever store its sagas live in), the slots (``fleet_slots``), the stop signals and
one observability server, where every store is named by its label, never its URL.

A store that cannot be served at start (unreachable, not migrated, refused) is reported and
tried again with a backoff while the others are served; one lost later is ridden out by its
own loops. ``/healthz`` is healthy while any store is; ``/readyz`` is ready while every store
claims, and names each store's state.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from effectusd.backends.errors import DATABASE_ERRORS, unavailable_text
from effectusd.backends.migrations import MigrationError
from effectusd.config import Config, ConfigError
from effectusd.core.errors import SchemaNotReady
from effectusd.core.replication import REFUSED_SERVERS
from effectusd.core.stores import Store
from effectusd.dispatcher.assembly import (
    configured_capacity,
    destination_executors,
    fencing_provider,
    new_owner_id,
)
from effectusd.dispatcher.daemon import CLOSE_BOUND_S, Daemon
from effectusd.dispatcher.fleet_slots import FleetSlots
from effectusd.dispatcher.metrics import Metrics
from effectusd.dispatcher.observability import ObservabilityServer
from effectusd.dispatcher.signals import install_stop_signals
from effectusd.executors.protocol import Executor

log = logging.getLogger("effectusd.daemon")

# What keeps one store from being served, tried again while the others are served (and a
# server refused at start: read-only, or without the synchronous standby required).
START_ERRORS: tuple[type[BaseException], ...] = (
    *DATABASE_ERRORS,
    SchemaNotReady,
    MigrationError,
    *REFUSED_SERVERS,
)
RETRIED: tuple[type[BaseException], ...] = (*START_ERRORS, ConfigError)
RETRY_FIRST_S = 0.5
RETRY_MAX_S = 30.0
# The fleet's own series, unlabelled by store: the HTTP server's, and which stores are served.
OWN_FAMILIES = ("effectusd_http_connections_refused", "effectusd_store_serving")


@dataclass
class Part:
    """One store of the fleet and the daemon serving it."""

    store: Store
    daemon: Daemon
    trouble: str | None = None  # why it could not be started, the last time it was tried

    @property
    def label(self) -> str:
        return str(self.store.label)


class FleetMetrics(Metrics):
    """The fleet's /metrics: every store's series with a ``store`` label (its label), beside
    the server's own and ``effectusd_store_serving``."""

    def __init__(self, parts: Sequence[Part]) -> None:
        super().__init__()
        self.parts = parts
        self.serving = self._gauge(
            "effectusd_store_serving",
            "1 while the daemon serves the store (started, claiming), else 0.",
            ("store",),
        )

    def exposition(self) -> bytes:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_ByStore(self))
        return generate_latest(registry)

    def outcome_totals(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for part in self.parts:
            for outcome, count in part.daemon.metrics.outcome_totals().items():
                totals[outcome] = totals.get(outcome, 0) + count
        return totals


class _ByStore(Collector):
    def __init__(self, metrics: FleetMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Any:
        families: dict[str, Metric] = {}
        for family in self.metrics.registry.collect():
            if family.name in OWN_FAMILIES:
                families[family.name] = family
        for part in self.metrics.parts:
            for family in part.daemon.metrics.registry.collect():
                if family.name in OWN_FAMILIES:
                    continue
                merged = families.get(family.name)
                if merged is None:
                    merged = Metric(family.name, family.documentation, family.type, family.unit)
                    families[family.name] = merged
                for sample in family.samples:
                    labels = {"store": part.label, **sample.labels}
                    merged.add_sample(
                        sample.name, labels, sample.value, sample.timestamp, sample.exemplar
                    )
        return iter(families.values())


class Fleet:
    """The daemon of several stores: ``run`` serves them all until stopped (or idle)."""

    def __init__(
        self,
        config: Config,
        stores: Sequence[Store],
        *,
        executors: Mapping[str, Executor] | None = None,
        owner: str | None = None,
        tracer_provider: object | None = None,
    ) -> None:
        self.config = config
        self.owner = owner or new_owner_id()
        self._executors = executors
        self.executors: Mapping[str, Executor] = {}
        self.stopping = asyncio.Event()
        self.started = False
        self.http_port: int | None = None
        capacity = configured_capacity(config, config.registry())
        self.slots = FleetSlots(capacity.limits, capacity.total_limit)
        self.parts = [self._part(store, tracer_provider) for store in stores]
        self.metrics = FleetMetrics(self.parts)

    def _part(self, store: Store, tracer_provider: object | None) -> Part:
        """A daemon for ``store``: the store's namespace, no server or signals of its own."""
        config = self.config.model_copy(deep=True, update={"namespace": store.namespace})
        config.observability.http_port = None
        owner = f"{self.owner}/{store.label}"  # its leases and log lines name the store
        daemon = Daemon(
            config, store.url, owner=owner, tracer_provider=tracer_provider, store_label=store.label
        )
        daemon.capacity = self.slots.for_store(daemon.wake.set)
        daemon.namespace = store.namespace
        daemon.stopping = self.stopping
        daemon.fleet_part = True
        return Part(store, daemon)

    def check_startup(self) -> None:
        """What no store can be served without: fencing a real setup may use, no console
        (`effectusd console` serves every store beside the daemon); and what the configuration
        allows but should change, said once for every store."""
        fencing_provider(self.config)
        for warning in self.config.warnings():
            log.warning("%s", warning)
        if self.config.console.enabled:
            raise ConfigError(
                "console.enabled: the daemon's console serves one store, and database.stores "
                f"lists {len(self.parts)}; serve the console of every store beside the daemon "
                "with `effectusd console`"
            )

    async def run(self, until_idle: bool = False) -> int:
        """Serve every store until stopped (with ``until_idle``: until each is idle; 1 if a
        store could not be served at all, which ``until_idle`` does not wait for)."""
        self.check_startup()
        own = self._executors is None
        self.executors = self._executors or destination_executors(self.config)
        for part in self.parts:
            part.daemon._executors = self.executors
        server: ObservabilityServer | None = None
        tasks: list[asyncio.Task[bool]] = []
        served: list[bool] = []
        try:
            server = await self._serve()
            install_stop_signals(self.stopping)
            self.started = True
            labels = ", ".join(part.label for part in self.parts)
            log.info("daemon %s serving %d stores (%s)", self.owner, len(self.parts), labels)
            tasks = [
                asyncio.create_task(self._serve_store(part, until_idle), name=part.label)
                for part in self.parts
            ]
            served = await asyncio.gather(*tasks)
        finally:
            self.started = False
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._close(server, own)
        return 0 if all(served) else 1

    async def _serve_store(self, part: Part, until_idle: bool) -> bool:
        """Serve one store; while it cannot be started, say why and try again (with
        ``until_idle``, once: False, it was not served)."""
        delay = RETRY_FIRST_S
        serving = self.metrics.serving.labels(part.label)
        while not self.stopping.is_set():
            try:
                await asyncio.to_thread(part.daemon.check_startup)  # connects: off the loop
                part.trouble = None
                serving.set(1)
                await part.daemon.run(until_idle, checked=True)
                return True
            except RETRIED as exc:
                if isinstance(exc, ConfigError) and not isinstance(exc.__cause__, REFUSED_SERVERS):
                    raise  # the configuration's, not the store's: no store is served with it
                part.trouble = _why(exc)
                again = "" if until_idle else f"; trying again in {delay:.1f}s"
                log.warning("store %r cannot be served (%s)%s", part.label, part.trouble, again)
            finally:
                serving.set(0)
            if until_idle:
                return False
            try:
                await asyncio.wait_for(self.stopping.wait(), delay)
            except TimeoutError:
                delay = min(delay * 2, RETRY_MAX_S)
        return True  # asked to stop before it could be started

    async def _serve(self) -> ObservabilityServer | None:
        observability = self.config.observability
        if observability.http_port is None:
            return None
        server = ObservabilityServer(self.metrics, self._healthy, self._ready)
        self.http_port = await server.start(observability.http_host, observability.http_port)
        log.info("serving /healthz and /readyz on port %d", self.http_port)
        return server

    async def _close(self, server: ObservabilityServer | None, own_executors: bool) -> None:
        try:
            async with asyncio.timeout(CLOSE_BOUND_S):
                if server is not None:
                    await server.close()
                if own_executors:
                    for executor in self.executors.values():
                        await executor.aclose()
        except TimeoutError:
            log.warning("closing connections took over %.0fs; exiting anyway", CLOSE_BOUND_S)

    async def _healthy(self) -> tuple[bool, dict[str, object]]:
        """Healthy while any store is served and healthy; each store's detail by label."""
        oks, stores = await self._checks(ready=False)
        return any(oks), {"stores": stores}

    async def _ready(self) -> tuple[bool, dict[str, object]]:
        """Ready while every store claims; each store's detail by label."""
        oks, stores = await self._checks(ready=True)
        ready = self.started and not self.stopping.is_set() and all(oks)
        return ready, {
            "started": self.started,
            "draining": self.stopping.is_set(),
            "stores": stores,
            **({"warnings": warnings} if (warnings := self.config.warnings()) else {}),
        }

    async def _checks(self, *, ready: bool) -> tuple[list[bool], dict[str, object]]:
        """Each store's health (or readiness), and its detail by label."""
        checks = await asyncio.gather(*(self._store_check(part, ready) for part in self.parts))
        stores: dict[str, object] = {
            part.label: detail for part, (_, detail) in zip(self.parts, checks, strict=True)
        }
        return [ok for ok, _ in checks], stores

    async def _store_check(self, part: Part, ready: bool) -> tuple[bool, dict[str, object]]:
        daemon = part.daemon
        if not daemon.started:
            detail: dict[str, object] = {"database": "not connected"}
            if part.trouble is not None:
                detail["trouble"] = part.trouble
            return False, {"ok": False, **detail}
        ok, detail = await (daemon._ready() if ready else daemon._healthy())
        detail.pop("warnings", None)  # the configuration's, said once for the fleet
        return ok, {"ok": ok, "namespace": part.store.namespace, **detail}


def _why(error: BaseException) -> str:
    """Why a store could not be started, in words that quote no URL."""
    if isinstance(error, DATABASE_ERRORS):
        return unavailable_text(error)
    return " ".join(str(error).split())

"""The probe loop (docs/design.md section 7, Probes): take the due probes of blocked
dispatches (``effectusd.operator.probes.take_probes``) that each destination has room for (its
``probe_concurrency``, beside its calls), and run each as a task of its own: ask the destination
over its own executor, settle the answer in its own guarded transaction. The loop takes more as
probes end, never waiting for the slowest one. A probe that fails in any way (a hostile
destination, an answer that cannot be stored, a database fault) touches its dispatch only, and
is asked again after its ``every``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from effectusd.backends import Session
from effectusd.backends.errors import DATABASE_ERRORS, failure_name
from effectusd.config import Config
from effectusd.core.probes import ProbeAnswer, ProbeTimes, decide
from effectusd.core.states import Direction
from effectusd.core.templates import TemplateError
from effectusd.core.wire import RequestIdentity
from effectusd.dispatcher.metrics import Metrics
from effectusd.executors.probe import ProbeReply, send_probe
from effectusd.executors.protocol import Executor
from effectusd.operator.probes import (
    Pending,
    ProbeTicket,
    Settled,
    probes_pending,
    settle_probe,
    take_probes,
)

log = logging.getLogger("effectusd.daemon")

PROBE_INTERVAL_S = 1.0  # how often a daemon looks for due probes
PROBE_BATCH = 32  # probes taken per round
# With no verb probed, a round only closes the probes of a removed probe config (due for
# operator.probes.UNPROBED_GRACE before they are): once a minute is soon enough.
UNPROBED_INTERVAL_S = 60.0


class Prober:
    def __init__(
        self,
        config: Config,
        session: Session,
        executors: Mapping[str, Executor],
        metrics: Metrics,
        *,
        on_settled: Callable[[], None] | None = None,
    ) -> None:
        """``on_settled``: called as each probe ends (a settled step may have work due)."""
        self.config = config
        self.registry = config.registry()
        self.session = session
        self.executors = executors
        self.metrics = metrics
        self.on_settled = on_settled
        self.probes = {
            name: verb.probe for name, verb in config.verbs.items() if verb.probe is not None
        }
        margin = config.dispatcher.lease_margin
        destination = {name: config.verbs[name].destination for name in self.probes}
        # A taken probe is not due again before its destination's timeout plus the lease
        # margin have passed: by then it was answered, or lost with its daemon.
        self.hold = {
            name: config.destinations[destination[name]].timeout + margin for name in self.probes
        }
        self._verbs = {
            name: [verb for verb in self.probes if destination[verb] == name]
            for name in config.destinations
        }
        self.flying: dict[str, set[asyncio.Task[Settled | None]]] = {
            name: set() for name in config.destinations
        }
        self._taking = asyncio.Lock()  # one take at a time: the room it reads is the room
        self._ended = asyncio.Event()  # a probe ended: there may be room for a due one

    @property
    def in_flight(self) -> int:
        return sum(len(tasks) for tasks in self.flying.values())

    async def round(self) -> float:
        self._ended.clear()  # before taking: a probe that ends meanwhile cuts the wait short
        await self.take()
        return PROBE_INTERVAL_S if self.probes else UNPROBED_INTERVAL_S

    async def sleep(self, seconds: float) -> None:
        """The loop's wait: the interval, or until a probe ends (its room is free again)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._ended.wait()

    async def take(self) -> list[asyncio.Task[Settled | None]]:
        """Schedule, and take the due probes each destination has room for now (its
        ``probe_concurrency`` less its probes in flight), each started as its own task."""
        async with self._taking:
            room = [
                (verbs, self.config.destinations[name].probe_concurrency - len(self.flying[name]))
                for name, verbs in self._verbs.items()
            ]
            taken = await self.session.write(
                take_probes(self.probes, PROBE_BATCH, hold=self.hold, groups=room)
            )
            for verb, _ in taken.scheduled:
                self.metrics.probes.labels(verb, "scheduled").inc()
            for row, reason in taken.given_up:
                self.metrics.probes.labels(row["verb"], Settled.GIVEN_UP.value).inc()
                said(row, Settled.GIVEN_UP, None, reason)
            return [self._start(ticket) for ticket in taken.tickets]

    def _start(self, ticket: ProbeTicket) -> asyncio.Task[Settled | None]:
        flying = self.flying.setdefault(ticket.row["destination"], set())
        task = asyncio.create_task(self.probe(ticket), name=f"probe-{ticket.dispatch_id}")
        flying.add(task)

        def ended(done: asyncio.Task[Settled | None]) -> None:
            flying.discard(done)
            self._ended.set()
            if self.on_settled is not None:
                self.on_settled()

        task.add_done_callback(ended)
        return task

    async def once(self) -> list[Settled]:
        """Take what is due and wait for those probes: what each did."""
        settled = await asyncio.gather(*await self.take())
        return [done for done in settled if done is not None]

    async def drain(self, seconds: float) -> None:
        """Wait up to ``seconds`` for the probes in flight; cancel the rest (each stays
        counted and held: asked again after its hold, by whichever daemon takes it)."""
        tasks = [task for flying in self.flying.values() for task in flying]
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=seconds)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def pending(self) -> Pending:
        """How the probes stand: due, or scheduled later (for ``run --until-idle``)."""
        return await self.session.read(probes_pending(list(self.probes)))

    async def probe(self, ticket: ProbeTicket) -> Settled | None:
        """Ask about one taken probe and settle the answer; None when that failed."""
        try:
            reply = await self._ask(ticket)
            config = self.probes[ticket.verb]
            destination = self.config.destinations[ticket.row["destination"]]
            verb = self.config.verbs[ticket.verb]
            decision = decide(
                reply.answer,
                config,
                ProbeTimes(ticket.row["deadline"], ticket.taken_at, ticket.probes),
                honours_deadline=destination.honours_deadline,
                clock_skew=destination.clock_skew,
                result_schema=verb.result_schema,
            )
            settled = await self.session.write(
                settle_probe(
                    ticket,
                    decision,
                    reply.answer.status,
                    reply.evidence,
                    registry=self.registry,
                    max_probes=config.max_probes,
                )
            )
        except Exception as exc:  # one probe's fault touches its dispatch only
            # A database's message may quote a row's values: only its class and SQLSTATE.
            database = isinstance(exc, DATABASE_ERRORS)
            log.error(
                "probe of dispatch %d (saga %s) failed (%s); asked again after its interval",
                ticket.dispatch_id,
                ticket.saga_id,
                failure_name(exc) if database else type(exc).__name__,
                exc_info=None if database else exc,
            )
            self.metrics.probes.labels(ticket.verb, "failed").inc()
            return None
        self.metrics.probes.labels(ticket.verb, settled.value).inc()
        said(ticket.row, settled, ticket.probes, decision.reason)
        return settled

    async def _ask(self, ticket: ProbeTicket) -> ProbeReply:
        row = ticket.row
        destination = row["destination"]
        try:
            path = self.probes[ticket.verb].render_path(
                row["idempotency_key"], ticket.args, ticket.facts
            )
        except TemplateError as exc:  # names the placeholder, never a value
            return ProbeReply(ProbeAnswer(None, problem=f"probe path: {exc}"), {})
        timeout = self.config.destinations[destination].timeout
        identity = _identity(ticket, datetime.now(UTC) + timeout)
        return await send_probe(
            self.executors[destination], identity, ticket.dispatch_id, path, timeout
        )


# The one log line of a probe that moved its dispatch, or was refused by the settlement's guard.
_SAID = {
    Settled.COMMITTED: (logging.INFO, "settled as committed"),
    Settled.NOT_COMMITTED: (logging.INFO, "settled as not committed (the engine's rules go on)"),
    Settled.GIVEN_UP: (logging.WARNING, "probes given up: a person decides (effectusd resolve)"),
    Settled.MOVED_ON: (logging.INFO, "kept as evidence only: the dispatch moved on meanwhile"),
}


def said(row: Mapping[str, Any], settled: Settled, probe: int | None, reason: str) -> None:
    """Log what a probe did to its step, when it did something a reader of the log must know
    (a step settled, given up, or left alone by the guard); ``reason`` is our words only."""
    if settled not in _SAID:
        return
    level, what = _SAID[settled]
    log.log(
        level,
        "probe%s of saga %s step %s (%s): %s; %s",
        "" if probe is None else f" {probe}",
        row["saga_id"],
        row["effect_id"],
        row["direction"],
        reason,
        what,
    )


def _identity(ticket: ProbeTicket, deadline: datetime) -> RequestIdentity:
    """The key's identity, as its attempts carried it, under a request ID of the probe's own
    (it is no attempt) and with no fencing grant (it holds no resource)."""
    row = ticket.row
    return RequestIdentity(
        idempotency_key=row["idempotency_key"],
        request_id=str(uuid.uuid4()),
        execution_id=row["execution_id"],
        saga_id=row["saga_id"],
        effect_id=row["effect_id"],
        attempt=max(int(row["requests"]), 1),  # the X-Effectus-Attempt its requests carried
        direction=Direction(row["direction"]),
        verb=ticket.verb,
        argument_hash=row["args_hash"],
        contract_hash=row["contract_hash"],
        fencing_grants=(),
        deadline=deadline,
        key_issued_at=row["created_at"],
    )

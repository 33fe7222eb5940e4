"""The probe loop (docs/design.md section 7, Probes): every round, take the due probes of
blocked dispatches (``effectusd.operator.probes.take_probes``), ask each destination over its
own executor, and settle each answer in its own guarded transaction. A probe that fails in any
way (a hostile destination, an answer that cannot be stored, a database fault) touches its
dispatch only: the round goes on, and that probe is asked again after its ``every``.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime

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
from effectusd.operator.probes import ProbeTicket, Settled, settle_probe, take_probes

log = logging.getLogger("effectusd.daemon")

PROBE_INTERVAL_S = 1.0  # how often a daemon looks for due probes
PROBE_BATCH = 32  # probes taken per round


class Prober:
    def __init__(
        self,
        config: Config,
        session: Session,
        executors: Mapping[str, Executor],
        metrics: Metrics,
    ) -> None:
        self.config = config
        self.registry = config.registry()
        self.session = session
        self.executors = executors
        self.metrics = metrics
        self.probes = {
            name: verb.probe for name, verb in config.verbs.items() if verb.probe is not None
        }
        # A round's probes to one destination: at most its max_concurrency at once (besides
        # its calls, which the pipeline's slots bound).
        self._room = {
            name: asyncio.Semaphore(destination.max_concurrency)
            for name, destination in config.destinations.items()
        }

    async def round(self) -> float:
        await self.once()
        return PROBE_INTERVAL_S

    async def once(self) -> list[Settled]:
        """One round: schedule, take, ask and settle; what each taken probe did."""
        taken = await self.session.write(take_probes(self.probes, PROBE_BATCH))
        for verb, _ in taken.scheduled:
            self.metrics.probes.labels(verb, "scheduled").inc()
        settled = await asyncio.gather(*(self.probe(ticket) for ticket in taken.tickets))
        return [done for done in settled if done is not None]

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
        async with self._room[destination]:
            identity = _identity(ticket, datetime.now(UTC) + timeout)
            return await send_probe(
                self.executors[destination], identity, ticket.dispatch_id, path, timeout
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

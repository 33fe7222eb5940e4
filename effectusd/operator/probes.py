"""Reconciliation probes as store operations (docs/design.md section 7, Probes): take the due
probes, and settle what one answer decided, the way ``resolve`` settles what a person found
out: in one transaction holding the saga (``lock_saga``), through the engine's ``settle`` and
the recorder's writer (``write_transition``), with the actor ``probe``. The daemon's probe loop
(``effectusd.dispatcher.probes``) sends the probes between the two.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from effectusd.backends.operation import Operation
from effectusd.core.canonical import JsonValue
from effectusd.core.engine import settle
from effectusd.core.probes import (
    PROBE_ACTOR,
    ProbeConfig,
    ProbeDecision,
    Verdict,
    first_probe_at,
)
from effectusd.core.registry import Registry
from effectusd.core.states import Direction, DispatchState, OutcomeClass, SettledBy
from effectusd.core.transition import Completion, DispatchFacts
from effectusd.operator.locked_saga import lock_saga, write_transition
from effectusd.store.operations import event
from effectusd.store.rows import dispatch_facts

GUARDED = ("state", "attempt", "lease_token", "uncertain_attempt")


class Settled(StrEnum):
    """What one probe did to its dispatch: the ``answer`` label of effectusd_probes_total."""

    COMMITTED = "committed"
    NOT_COMMITTED = "not_committed"
    KEPT_BLOCKED = "kept_blocked"
    GIVEN_UP = "given_up"
    MOVED_ON = "moved_on"  # the dispatch changed since the probe was taken: evidence only


@dataclass(frozen=True)
class ProbeTicket:
    """A probe taken: the dispatch as it was read then (its guard) and the probe's number."""

    row: dict[str, Any]
    probes: int  # this probe's number, 1 for the first
    taken_at: datetime  # the database clock when it was taken: it is sent after this

    @property
    def dispatch_id(self) -> int:
        return int(self.row["dispatch_id"])

    @property
    def saga_id(self) -> str:
        return str(self.row["saga_id"])

    @property
    def verb(self) -> str:
        return str(self.row["verb"])

    @property
    def facts(self) -> dict[str, JsonValue]:
        facts = self.row["facts"]
        return dict(json.loads(facts) if isinstance(facts, str | bytes) else facts or {})

    @property
    def args(self) -> dict[str, JsonValue]:
        return dict(json.loads(self.row["args_canonical"]))

    def guard(self) -> tuple[Any, ...]:
        return tuple(_comparable(self.row[name]) for name in GUARDED)


@dataclass
class Taken:
    scheduled: list[tuple[str, str]]  # (verb, saga_id) of each dispatch scheduled now
    tickets: list[ProbeTicket]


def take_probes(probes: Mapping[str, ProbeConfig], limit: int) -> Operation[Taken]:
    """Schedule the blocked dispatches of verbs with a probe that have none yet (an event
    each), then take the due probes (at most ``limit``), each moved on by its ``every``."""
    taken = Taken([], [])
    verbs = sorted(probes)
    if not verbs:
        return taken
    unscheduled = yield ("probe_unscheduled", {"verbs": verbs, "limit": limit})
    for row in unscheduled:
        config = probes[row["verb"]]
        first = first_probe_at(row["deadline"], config)
        params = {"dispatch_id": row["dispatch_id"], "attempt": row["attempt"]}
        inserted = yield ("probe_schedule", {**params, "next_probe_at": first})
        if inserted:  # another daemon may have scheduled it a moment ago
            taken.scheduled.append((row["verb"], row["saga_id"]))
            yield _probe_event(
                row,
                "probe_scheduled",
                {"first_probe_at": first.isoformat(), "max_probes": config.max_probes},
            )
    every = {verb: probes[verb].every.total_seconds() for verb in verbs}
    due = yield (
        "probe_take",
        {"limit": limit, "verbs": verbs, "every_s": [every[v] for v in verbs], "every": every},
    )
    if not due:
        return taken
    targets = yield ("probe_targets", {"dispatch_ids": [row["dispatch_id"] for row in due]})
    by_id = {row["dispatch_id"]: row for row in targets}
    for row in due:
        target = by_id.get(row["dispatch_id"])
        if (
            target is None
            or target["state"] != DispatchState.BLOCKED_UNKNOWN.value
            or target["attempt"] != row["attempt"]
            or target["verb"] not in probes
        ):
            # Settled, sent again or no longer probed since it was scheduled: nothing to ask.
            yield _update(row["dispatch_id"], row["attempt"], None, None)
            continue
        taken.tickets.append(ProbeTicket(dict(target), int(row["probes"]), row["db_now"]))
    return taken


def settle_probe(
    ticket: ProbeTicket,
    decision: ProbeDecision,
    status: int | None,
    evidence: Mapping[str, Any],
    *,
    registry: Registry,
    max_probes: int,
) -> Operation[Settled]:
    """Apply one probe's ``decision`` in one transaction guarded on what the ticket read: a
    dispatch whose state, attempt, lease token or uncertain attempt moved on meanwhile keeps
    the probe as evidence only."""
    locked = yield from lock_saga(ticket.saga_id)
    row = locked.dispatch_rows.get(ticket.dispatch_id)
    detail: dict[str, Any] = {
        "probe": ticket.probes,
        "max_probes": max_probes,
        "verdict": decision.verdict.value,
        "status": status,
        "evidence": dict(evidence),
    }
    attempt = int(ticket.row["attempt"])
    if row is None or tuple(_comparable(row[name]) for name in GUARDED) != ticket.guard():
        detail["guard"] = "missed: the dispatch moved on after the probe was taken"
        yield _probe_event(ticket.row, "probe_answered", detail, decision.reason)
        yield _update(ticket.dispatch_id, attempt, None, status)
        return Settled.MOVED_ON
    target = dispatch_facts(row)
    if decision.verdict in (Verdict.COMMITTED, Verdict.NOT_COMMITTED):
        completion = _probe_answer(target, decision)
        # The probe answered the question the uncertain attempt left open.
        settled = replace(target, uncertain_attempt=None)
        transition = settle(completion, settled, locked.saga, registry, random.random())
        yield _probe_event(
            ticket.row,
            "probe_answered",
            detail,
            decision.reason,
            to_state=transition.dispatch_state.value,
        )
        yield from write_transition(ticket.saga_id, transition, completion, row)
        yield _update(ticket.dispatch_id, attempt, None, status)
        committed = decision.verdict is Verdict.COMMITTED
        return Settled.COMMITTED if committed else Settled.NOT_COMMITTED
    if decision.verdict is Verdict.GIVE_UP:
        yield _probe_event(ticket.row, "probe_given_up", detail, decision.reason)
        yield _update(ticket.dispatch_id, attempt, None, status, given_up=True)
        return Settled.GIVEN_UP
    yield _probe_event(ticket.row, "probe_answered", detail, decision.reason)
    yield _update(ticket.dispatch_id, attempt, decision.next_at, status)
    return Settled.KEPT_BLOCKED


def _probe_answer(target: DispatchFacts, decision: ProbeDecision) -> Completion:
    """What the probe found out, as the completion of the uncertain attempt (as ``resolve``
    builds the operator's): success with the result, or known not committed (retryable)."""
    committed = decision.verdict is Verdict.COMMITTED
    return Completion(
        dispatch_id=target.dispatch_id,
        attempt=target.attempt,
        lease_token=None,
        outcome=OutcomeClass.SUCCESS if committed else OutcomeClass.RETRYABLE,
        settled_by=SettledBy.OPERATOR,
        result=decision.result if committed else None,
        error=None if committed else f"known not committed, per {PROBE_ACTOR}: {decision.reason}",
        actor=PROBE_ACTOR,
        operator_evidence=decision.reason,
    )


def _probe_event(
    row: Mapping[str, Any],
    kind: str,
    detail: Mapping[str, Any],
    evidence: str | None = None,
    *,
    to_state: str | None = None,
) -> tuple[str, dict[str, Any]]:
    return event(
        str(row["saga_id"]),
        kind,
        PROBE_ACTOR,
        effect_id=str(row["effect_id"]),
        direction=Direction(row["direction"]).value,
        attempt=int(row["attempt"]),
        from_state=DispatchState.BLOCKED_UNKNOWN.value if to_state is not None else None,
        to_state=to_state,
        evidence=evidence,
        detail=detail,
    )


def _update(
    dispatch_id: int,
    attempt: int,
    next_at: datetime | None,
    status: int | None,
    *,
    given_up: bool = False,
) -> tuple[str, dict[str, Any]]:
    return (
        "probe_update",
        {
            "dispatch_id": dispatch_id,
            "attempt": attempt,
            "next_probe_at": next_at,
            "last_status": status,
            "given_up": given_up,
        },
    )


def _comparable(value: Any) -> Any:
    """A lease token reads as a UUID on PostgreSQL and as text on SQLite."""
    return None if value is None else str(value)

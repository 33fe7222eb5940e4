"""Reconciliation probes as store operations (docs/design.md section 7, Probes): take the due
probes, and settle what one answer decided, the way ``resolve`` settles what a person found
out: in one transaction holding the saga (``lock_saga``), through the engine's ``settle`` and
the recorder's writer (``write_transition``), with the actor ``probe``. The daemon's probe loop
(``effectusd.dispatcher.probes``) sends the probes between the two.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
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
from effectusd.core.states import Direction, DispatchState
from effectusd.core.transition import Completion, DispatchFacts
from effectusd.operator.locked_saga import lock_saga, write_transition
from effectusd.store.operations import event
from effectusd.store.rows import dispatch_facts

GUARDED = ("state", "attempt", "lease_token", "uncertain_attempt")
# How long a due probe of a verb this daemon has no probe for waits for a daemon that has one
# (which takes it within seconds: a rolling deploy that adds the probe) before it is closed.
UNPROBED_GRACE = timedelta(minutes=10)


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
    # each dispatch (its row) given up when taken, its last probe unanswered, and why
    given_up: list[tuple[dict[str, Any], str]] = field(default_factory=list)


# The verbs of one destination, and how many of their probes may be taken now.
Group = tuple[Sequence[str], int]


def take_probes(
    probes: Mapping[str, ProbeConfig],
    limit: int,
    *,
    hold: Mapping[str, timedelta] | None = None,
    groups: Sequence[Group] | None = None,
) -> Operation[Taken]:
    """Close the due probes of verbs that have no probe now (``_close_unprobed``), schedule the
    blocked dispatches of verbs with a probe that have none yet (an event each), then take
    the due probes: of each group's verbs at most its room (and ``limit``;
    without groups, of every verb at most ``limit``). Each probe counts when taken and is held
    for its verb's ``hold`` (by default its ``every``); one whose probes were all spent before
    (the last answer lost) is given up instead of sent."""
    taken = Taken([], [])
    verbs = sorted(probes)
    taken.given_up += yield from _close_unprobed(verbs, limit)
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
    held = {verb: max(probes[verb].every, (hold or {}).get(verb, timedelta(0))) for verb in verbs}
    due: list[dict[str, Any]] = []
    for group, room in [(verbs, limit)] if groups is None else groups:
        if room > 0 and group:
            due += yield _take(probes, sorted(group), min(room, limit), held)
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
            yield _update(row["dispatch_id"], row["attempt"], int(row["probes"]), None, None)
        elif row["next_probe_at"] is None:  # its probes were all spent: closed
            reason = yield from _give_up_lost(target, int(row["probes"]), probes[target["verb"]])
            if reason is not None:
                taken.given_up.append((dict(target), reason))
        else:
            taken.tickets.append(ProbeTicket(dict(target), int(row["probes"]), row["db_now"]))
    return taken


def _take(
    probes: Mapping[str, ProbeConfig], verbs: list[str], limit: int, held: Mapping[str, timedelta]
) -> tuple[str, dict[str, Any]]:
    """probe_take for ``verbs``; each store reads the per-verb plan its own way."""
    hold_s = [held[verb].total_seconds() for verb in verbs]
    max_probes = [probes[verb].max_probes for verb in verbs]
    plan = {
        verb: {"hold": h, "max": m} for verb, h, m in zip(verbs, hold_s, max_probes, strict=True)
    }
    params = {"limit": limit, "verbs": verbs, "hold_s": hold_s, "max_probes": max_probes}
    return ("probe_take", {**params, "plan": plan})


def _give_up_lost(
    target: Mapping[str, Any], probes: int, config: ProbeConfig
) -> Operation[str | None]:
    """Give up a dispatch whose last probe was taken and never answered (lost with its daemon,
    or still unanswered after its hold): it counted, and no more are allowed. Once: None when
    the probes were given up already, else why."""
    moved = yield _update(
        target["dispatch_id"], target["attempt"], probes, None, None, given_up=True
    )
    if not moved:
        return None
    reason = f"max_probes {config.max_probes} spent (probe {probes} went unanswered)"
    detail = {"probe": probes, "max_probes": config.max_probes, "verdict": Verdict.GIVE_UP.value}
    yield _probe_event(target, "probe_given_up", {**detail, "status": None}, reason)
    return reason


def _close_unprobed(verbs: list[str], limit: int) -> Operation[list[tuple[dict[str, Any], str]]]:
    """Close the probes of verbs that have no probe now (``verbs``: those that do), due for
    ``UNPROBED_GRACE``: its probe config was removed, so none would take them again. A
    dispatch still blocked on the probed attempt is given up (an event saying why, for a
    person to resolve); one that moved on is only closed. What was given up, and why."""
    params = {"verbs": verbs, "limit": limit, "grace_s": UNPROBED_GRACE.total_seconds()}
    rows = yield ("probe_orphans", params)
    given_up = []
    for row in rows:
        probes = int(row["probes"])
        if not row["blocked"]:
            yield _update(row["dispatch_id"], row["attempt"], probes, None, None)
            continue
        moved = yield _update(row["dispatch_id"], row["attempt"], probes, None, None, given_up=True)
        if moved:
            verb = row["verb"]
            reason = (
                f"verb {verb} has no probe in the configuration now ([verbs.{verb}.probe] "
                "removed, or the verb): its probes are closed"
            )
            detail = {"probe": probes, "verdict": Verdict.GIVE_UP.value, "status": None}
            yield _probe_event(row, "probe_given_up", {**detail, "closed": "no_probe"}, reason)
            given_up.append((dict(row), reason))
    return given_up


@dataclass(frozen=True)
class Pending:
    """The probes of blocked dispatches not yet settled: what ``run --until-idle`` waits for
    (due now, or a blocked dispatch not yet scheduled) and what it leaves (scheduled later)."""

    due: int
    unscheduled: bool
    later: int
    next_at: datetime | None  # when the first of those scheduled later is due
    db_now: datetime | None


def probes_pending(verbs: Sequence[str]) -> Operation[Pending]:
    """How the probes of ``verbs`` stand now (the database clock)."""
    if not verbs:
        return Pending(0, False, 0, None, None)
    unscheduled = yield ("probe_unscheduled", {"verbs": sorted(verbs), "limit": 1})
    [row] = yield ("probe_pending", {"verbs": sorted(verbs)})
    return Pending(
        int(row["due"] or 0),
        bool(unscheduled),
        int(row["later"] or 0),
        row["next_at"],
        row["db_now"],
    )


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
        yield _update(ticket.dispatch_id, attempt, ticket.probes, None, status)
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
        yield _update(ticket.dispatch_id, attempt, ticket.probes, None, status)
        committed = decision.verdict is Verdict.COMMITTED
        return Settled.COMMITTED if committed else Settled.NOT_COMMITTED
    if decision.verdict is Verdict.GIVE_UP:
        given_up = _update(ticket.dispatch_id, attempt, ticket.probes, None, status, given_up=True)
        if (yield given_up):
            yield _probe_event(ticket.row, "probe_given_up", detail, decision.reason)
            return Settled.GIVEN_UP
        # Given up already (this probe's answer came after its hold): evidence only.
        yield _probe_event(ticket.row, "probe_answered", detail, decision.reason)
        return Settled.KEPT_BLOCKED
    yield _probe_event(ticket.row, "probe_answered", detail, decision.reason)
    yield _update(ticket.dispatch_id, attempt, ticket.probes, decision.next_at, status)
    return Settled.KEPT_BLOCKED


def _probe_answer(target: DispatchFacts, decision: ProbeDecision) -> Completion:
    """What the probe found out, as the completion of the uncertain attempt (as ``resolve``
    builds the operator's): success with the result, or known not committed (retryable)."""
    committed = decision.verdict is Verdict.COMMITTED
    return Completion.probed(target, committed, decision.result, PROBE_ACTOR, decision.reason)


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
    probes: int,
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
            "probes": probes,
            "next_probe_at": next_at,
            "last_status": status,
            "given_up": given_up,
        },
    )


def _comparable(value: Any) -> Any:
    """A lease token reads as a UUID on PostgreSQL and as text on SQLite."""
    return None if value is None else str(value)

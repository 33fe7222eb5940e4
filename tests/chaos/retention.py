"""The retention row (issue 30): the kit's ledger pruned mid-run while an operator retries old
blocked dispatches, and no business mutation happens twice.

Three kit destinations (tests/chaos/destination.py) keep their answers ``retention`` seconds,
with a clock skew allowance of SKEW. Two saga shapes share them:

    order (even):    reserve (healthy1.fenced: at_least_once, fenced on one of 4 slots shared
                     by all orders) -> charge (healthy2.once: at_most_once) -> ship
                     (healthy3.do: at_least_once; every 4th order fails it, so charge and
                     reserve are compensated)
    transfer (odd):  debit (healthy2.once) -> credit (healthy3.once); every 4th transfer's
                     credit fails, so debit is compensated

Daemons are killed (kill -9) at random moments and 20% of answers are lost after the commit
(a stall past the timeout or a reset); an at_most_once call that may have arrived blocks its
saga ``blocked_unknown``. All through the run, ``Operator.tick`` prunes the kit's ledger
with ``prune_ledger`` (as a service's scheduler would) and works through the blocked sagas as
a person would, each saga once, through the operator API the CLI runs: ``effectusd resolve
SAGA STEP --not-committed --retry`` for ``blocked_unknown`` (sent again without knowing
whether it committed), ``effectusd retry SAGA`` for ``blocked_fence`` and
``blocked_compensation``. One in three as soon as it blocks (the key still held, or never
stored), two in three once the retention has passed and the pruner has had its turn: the old
blocked dispatches whose keys were pruned.

Checked (runner._check counts mutations per key from chaos_mutations): no key mutated twice;
and that the row exercised what it claims: rows were pruned, retries came after the
retention, and the kit refused some (410 unknown_outcome, docs/design.md section 9,
Retention). Reported in ``Report.details``: the retries, how many the kit refused and the
states those sagas ended in. The control (``withhold_issued_at``: the kit never learns when a
key was issued, as from a daemon that predates the header) must show double mutations.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from effectusd import operator
from effectusd.config import load_config
from effectusd.core.states import Direction
from effectusd.destination import prune_ledger_sync
from effectusd.store.sql import store_backend
from tests.chaos.scenarios import Report, Scenario

Rows = Callable[[str, str], list[dict[str, Any]]]

SKEW = 1.0  # the kit's clock_skew here, seconds
PRUNE_EVERY = 0.5  # seconds between two prunes of the ledger
RETRIES_PER_TICK = 4  # the operator's pace, so the daemons are tended between retries
SLOTS = 4  # the fenced resources all orders share
ACTOR = "user:chaos-operator"
# The dispatch an operator action acts on, per blocked saga state.
TARGET = {
    "blocked_unknown": "blocked_unknown",
    "blocked_fence": "blocked_fence",
    "blocked_compensation": "failed_permanent",
}


def _step(name: str, verb: str, args: dict[str, Any], undo: str) -> dict[str, Any]:
    return {"id": name, "verb": verb, "args": args, "compensate": {"verb": undo, "args": args}}


def plan(healthy: list[str], index: int, fail_every: int) -> tuple[str, dict[str, Any]]:
    """An order (even ``index``) or a transfer (odd): see the module's docstring."""
    reserve, charge, ship = healthy
    fail = fail_every > 0 and (index // 2) % fail_every == 0
    if index % 2 == 0:
        steps = [
            _step(
                "reserve",
                f"{reserve}.fenced",
                {"slot": (index // 2) % SLOTS, "fail": False},
                f"{reserve}.undo",
            ),
            _step("charge", f"{charge}.once", {"i": index, "fail": False}, f"{charge}.undo"),
            _step("ship", f"{ship}.do", {"i": index, "fail": fail}, f"{ship}.undo"),
        ]
        return f"o-{index}", {"plan_id": "chaos-order", "steps": steps}
    steps = [
        _step("debit", f"{charge}.once", {"i": index, "fail": False}, f"{charge}.undo"),
        _step("credit", f"{ship}.once", {"i": index, "fail": fail}, f"{ship}.undo"),
    ]
    return f"t-{index}", {"plan_id": "chaos-transfer", "steps": steps}


@dataclass
class Retry:
    """One operator action: the saga, the state it was blocked in, the dispatch acted on and
        its attempt number then, whether it waited for the retention, and whether effectusd refused
    the action."""

    saga_id: str
    state: str
    dispatch_id: int
    attempt: int
    late: bool
    refused: bool  # by effectusd: the saga's state moved on before the operator acted


class Operator:
    """The ledger's pruner and the person retrying blocked sagas, one ``tick`` at a time."""

    def __init__(
        self, scenario: Scenario, config: Path, url: str, dest_url: str, rows: Rows
    ) -> None:
        self.scenario, self.config, self.url, self.dest_url = scenario, config, url, dest_url
        self.rows = rows
        self.registry = load_config(config).registry()
        self.backend = store_backend(url)
        self.first_seen: dict[str, float] = {}  # saga -> when it was first seen blocked
        self.waits: dict[str, float] = {}  # saga -> how long the operator lets it wait
        self.retries: list[Retry] = []
        self.done: set[str] = set()
        self.pruned = 0
        self.last_prune = 0.0

    def tick(self) -> bool:
        """Prune when due, retry the blocked sagas that have waited their turn; True while a
        blocked saga still awaits its retry (the run is not over)."""
        now = time.monotonic()
        if now - self.last_prune >= PRUNE_EVERY:
            with psycopg.connect(self.dest_url, autocommit=True) as conn:
                self.pruned += prune_ledger_sync(conn)
            self.last_prune = now
        blocked = self.rows(
            self.url,
            "SELECT saga_id, state FROM effectus_saga_instances WHERE state LIKE 'blocked_%'",
        )
        due: list[tuple[str, str]] = []
        waiting = False
        for row in blocked:
            saga = row["saga_id"]
            if saga in self.done:
                continue
            if saga not in self.first_seen:
                # two in three wait past the retention, the skew and a prune or two (the first
                # two do, so every run has old keys); the third is sent again at once
                late = len(self.first_seen) % 3 != 2
                self.first_seen[saga] = now
                self.waits[saga] = self.scenario.retention + SKEW + 2 * PRUNE_EVERY if late else 0
            if now - self.first_seen[saga] < self.waits[saga] or len(due) >= RETRIES_PER_TICK:
                waiting = True
                continue
            due.append((saga, row["state"]))
        if due:
            self._retry(due)
        return waiting or bool(due)

    def _retry(self, due: list[tuple[str, str]]) -> None:
        targets = {
            (row["saga_id"], row["state"]): row
            for row in self.rows(
                self.url,
                "SELECT saga_id, dispatch_id, effect_id, direction, state, attempt"
                " FROM effectus_saga_outbox WHERE state IN"
                " ('blocked_unknown', 'blocked_fence', 'failed_permanent')"
                " ORDER BY dispatch_id",  # the last one per saga and state wins: retry's own
            )
        }
        with self.backend.runner.connect() as conn:
            for saga, state in due:
                self.done.add(saga)
                target = targets.get((saga, TARGET.get(state, "")))
                if target is None:
                    continue  # blocked_contract, or it moved on meanwhile: nothing to act on
                try:
                    self.backend.runner.run(conn, self._action(saga, state, target))
                    refused = False
                except operator.Refused:  # its state moved on since it was read
                    refused = True
                late = self.waits[saga] > 0
                self.retries.append(
                    Retry(saga, state, target["dispatch_id"], target["attempt"], late, refused)
                )

    def _action(self, saga: str, state: str, target: dict[str, Any]) -> Any:
        """What a person types: ``effectusd resolve SAGA STEP --not-committed --retry`` for
        blocked_unknown (sent again without knowing whether it committed), ``effectusd retry
        SAGA`` otherwise; the same operations, run here without a process per saga."""
        evidence = "chaos: sent again without checking"
        if state == "blocked_unknown":
            return operator.resolve(
                saga,
                target["effect_id"],
                operator.Resolution.RETRY,
                registry=self.registry,
                actor=ACTOR,
                evidence=evidence,
                direction=Direction(target["direction"]),
            )
        return operator.retry(saga, registry=self.registry, actor=ACTOR, evidence=evidence)

    def check(self, report: Report) -> None:
        """What the kit did with the retries, and whether the row exercised what it claims."""
        refusals = self.rows(
            self.url,
            "SELECT dispatch_id, attempt FROM effectus_saga_attempts WHERE status_code = 410",
        )
        refused_after: dict[int, int] = {}
        for row in refusals:
            refused_after[row["dispatch_id"]] = max(
                row["attempt"], refused_after.get(row["dispatch_id"], 0)
            )
        ends = {
            row["saga_id"]: row["state"]
            for row in self.rows(self.url, "SELECT saga_id, state FROM effectus_saga_instances")
        }
        sent = [r for r in self.retries if not r.refused]
        refused = [r for r in sent if refused_after.get(r.dispatch_id, 0) > r.attempt]
        answers = {
            (row["dispatch_id"], row["attempt"]): f"{row['status_code'] or '-'} {row['outcome']}"
            for row in self.rows(
                self.url,
                "SELECT dispatch_id, attempt, status_code, outcome FROM effectus_saga_attempts",
            )
        }
        report.details = {
            "pruned": self.pruned,
            "operator_retries": len(sent),
            "retries_after_retention": sum(r.late for r in sent),
            "retries_refused_by_effectusd": len(self.retries) - len(sent),
            "refused_410": len(refused),
            "refused_ended": dict(Counter(ends[r.saga_id] for r in refused)),
            "retried_ended": dict(Counter(ends[r.saga_id] for r in sent)),
            # what each retry's attempt was answered: "status outcome" ("-": no answer)
            "retry_answers": dict(
                Counter(answers.get((r.dispatch_id, r.attempt + 1), "none") for r in sent)
            ),
            "answers_410": len(refusals),
        }
        v = report.violations
        if not report.kills:
            v.append("no daemon was killed: the row proves nothing")
        if not self.pruned:
            v.append("the ledger was never pruned: the row proves nothing")
        if not any(r.late for r in sent):
            v.append("no retry came after the retention: the row proves nothing")
        if not self.scenario.withhold_issued_at and not refused:
            v.append("the kit refused no retry (410): the row proves nothing")

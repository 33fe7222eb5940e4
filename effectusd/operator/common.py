"""What resolve, retry and cancel share: the locked facts, the report, the writer.

Lock order is the recorder's: the saga row (FOR NO KEY UPDATE, see op_lock_saga.sql), then
its dispatch rows in dispatch_id order. Two operators racing on one saga serialise on the saga
row; the second then reads what the first committed and is refused by name.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from effectusd.core.engine import resumed_stop_reason
from effectusd.core.operator_decisions import RefusalKind, Refused
from effectusd.core.states import OutcomeClass, SagaState, SettledBy
from effectusd.core.transition import Completion, DispatchFacts, SagaFacts, Transition
from effectusd.store.operations import Operation
from effectusd.store.rows import (
    TransitionRows,
    dispatch_facts,
    notify_rows,
    saga_facts,
    steps_by_saga,
    write_rows,
)


@dataclass
class ActionReport:
    """What an operator action did (the --json output)."""

    action: str
    saga_id: str
    actor: str
    evidence: str | None
    saga_state: dict[str, str]  # {"from": ..., "to": ...}
    decision: str
    effect_id: str | None = None
    direction: str | None = None
    dispatch_state: dict[str, str] | None = None
    enqueued: list[dict[str, str]] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"ok": True, **asdict(self)}

    def summary(self) -> str:
        where = f" {self.effect_id} ({self.direction})" if self.effect_id else ""
        lines = [f"{self.action}{where}: {self.decision.replace('_', ' ')}"]
        if self.dispatch_state:
            lines.append(f"  dispatch  {self.dispatch_state['from']} → {self.dispatch_state['to']}")
        saga_from, saga_to = self.saga_state["from"], self.saga_state["to"]
        lines.append(
            f"  saga      {self.saga_id}  "
            + (f"{saga_from} → {saga_to}" if saga_from != saga_to else f"still {saga_to}")
        )
        lines += [f"  enqueued  {e['effect_id']} ({e['direction']})" for e in self.enqueued]
        for key, value in self.detail.items():
            lines.append(f"  {key:9} {value}")
        lines.append(f"  by        {self.actor}" + (f": {self.evidence}" if self.evidence else ""))
        return "\n".join(lines)


@dataclass
class Locked:
    row: dict[str, Any]
    saga: SagaFacts
    dispatch_rows: dict[int, dict[str, Any]]
    dispatches: list[DispatchFacts]

    @property
    def saga_id(self) -> str:
        return self.saga.saga_id

    @property
    def state(self) -> SagaState:
        return self.saga.state


def lock_saga(saga_id: str) -> Operation[Locked]:
    rows = yield ("op_lock_saga", {"saga_id": saga_id})
    if not rows:
        raise Refused(RefusalKind.NOT_FOUND, f"saga {saga_id} not found")
    row = rows[0]
    dispatch_rows = yield ("op_lock_saga_dispatches", {"saga_id": saga_id})
    step_rows = yield ("select_steps_of_sagas", {"saga_ids": [saga_id]})
    saga = saga_facts(row, steps_by_saga(step_rows).get(saga_id, {}))
    return Locked(
        row,
        saga,
        {d["dispatch_id"]: d for d in dispatch_rows},
        [dispatch_facts(d) for d in dispatch_rows],
    )


_NO_ATTEMPT = Completion(0, 0, None, OutcomeClass.SUCCESS, SettledBy.OPERATOR)


def write_transition(
    saga_id: str,
    transition: Transition,
    completion: Completion | None = None,
    dispatch_row: dict[str, Any] | None = None,
    notify: tuple[str, ...] = (),
) -> Operation[None]:
    """The rows of an engine transition, written as the recorder writes them. The attempt
    rows are left alone: they keep the outcome their call had. The dispatch row is written
    only for a settlement (``completion`` with its ``dispatch_row``); ``notify`` wakes the
    destinations of rows made due again besides the transition's new dispatches."""
    writes = TransitionRows()
    writes.apply(
        completion or _NO_ATTEMPT,
        dispatch_row or {"saga_id": saga_id, "lease_token": None},
        transition,
        attempt=False,
        dispatch=dispatch_row is not None,
    )
    writes.destinations.update(notify)
    yield from write_rows(writes)
    yield from notify_rows(writes)


def enqueued(transition: Transition) -> list[dict[str, str]]:
    return [
        {"effect_id": s.effect_id, "direction": s.direction, "idempotency_key": s.idempotency_key}
        for s in transition.new_dispatches
    ]


def saga_after(locked: Locked, transition: Transition) -> dict[str, str]:
    after = transition.saga.state if transition.saga is not None else locked.state
    return {"from": locked.state.value, "to": after.value}


def resumed_reason(locked: Locked, state: SagaState, reason: str | None) -> str | None:
    """The stop reason for ``state`` when ``locked`` resumes (see
    ``effectusd.core.engine.resumed_stop_reason``)."""
    return resumed_stop_reason(locked.state, state, reason, locked.saga.compensation_reason)

"""The saga an operator action holds locked (named by the start of its id, as a person
names it), and how its transition is written.

Lock order is the recorder's: the saga row (FOR NO KEY UPDATE, see lock_sagas.sql), then
its dispatch rows in dispatch_id order. Two operators racing on one saga serialise on the saga
row; the second then reads what the first committed and is refused by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from effectusd.backends.operation import Operation
from effectusd.core.engine import resumed_stop_reason
from effectusd.core.operator_decisions import RefusalKind, Refused
from effectusd.core.states import SagaState
from effectusd.core.transition import Completion, DispatchFacts, SagaFacts, Transition
from effectusd.store.operations import locate_saga, lock_sagas
from effectusd.store.rows import (
    TransitionRows,
    dispatch_facts,
    notify_rows,
    saga_facts,
    write_rows,
)

T = TypeVar("T")


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


def on_saga(name: str, action: Callable[[str], Operation[T]]) -> Operation[T]:
    """``action`` on the saga ``name`` names: its full id or the unique start of one (as
    `sagas list` prints it), found in the action's own transaction, so that what the action
    writes on the timeline and reports carries the full id. Refused (not found) when no saga
    id starts so; AmbiguousSaga (from ``locate_saga``) when several do."""
    saga_id = yield from locate_saga(name)
    if saga_id is None:
        raise Refused(RefusalKind.NOT_FOUND, f"no saga id starts with {name}")
    return (yield from action(saga_id))


def lock_saga(saga_id: str) -> Operation[Locked]:
    rows = yield from lock_sagas(saga_ids=[saga_id])
    if not rows:
        raise Refused(RefusalKind.NOT_FOUND, f"saga {saga_id} not found")
    row = rows[0]
    dispatch_rows = yield ("op_lock_saga_dispatches", {"saga_id": saga_id})
    step_rows = yield ("select_steps_of_sagas", {"saga_ids": [saga_id]})
    saga = saga_facts(row, step_rows)
    return Locked(
        row,
        saga,
        {d["dispatch_id"]: d for d in dispatch_rows},
        [dispatch_facts(d) for d in dispatch_rows],
    )


def write_transition(
    saga_id: str,
    transition: Transition,
    completion: Completion | None = None,
    dispatch_row: dict[str, Any] | None = None,
    notify: tuple[str, ...] = (),
) -> Operation[None]:
    """The rows of an engine transition, written as the recorder writes them. The attempt
    rows are left alone: they keep the outcome their call had. The dispatch row is written
    only for a settlement (``completion`` with its ``dispatch_row``; no completion: no
    attempt ended, as for a cancel or a retry); ``notify`` wakes the
    destinations of rows made due again besides the transition's new dispatches."""
    writes = TransitionRows()
    writes.apply(
        completion,
        dispatch_row or {"saga_id": saga_id, "lease_token": None},
        transition,
        attempt=False,
        dispatch=dispatch_row is not None,
    )
    writes.woken.update(notify)
    yield from write_rows(writes)
    yield from notify_rows(writes)


def resumed_reason(locked: Locked, state: SagaState, reason: str | None) -> str | None:
    """The stop reason for ``state`` when ``locked`` resumes (see
    ``effectusd.core.engine.resumed_stop_reason``)."""
    return resumed_stop_reason(locked.state, state, reason, locked.saga.compensation_reason)

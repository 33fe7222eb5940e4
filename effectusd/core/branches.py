"""What a saga with parallel steps does next, from its steps' states alone
(docs/design.md section 4, "Parallel steps", and section 6).

Pure and total: the engine's builder asks ``next_moves`` after applying one outcome, and
carries the moves out. Going forward, every pending step whose dependencies all succeeded
starts. Once the saga undoes (a step failed, or a cancel was requested), nothing starts any
more: forward dispatches not yet sent are canceled, those in flight are waited for, and
then the succeeded steps are compensated one at a time, the latest to succeed first, and
never before a step that depends on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from effectusd.core.graph import PlanGraph
from effectusd.core.states import Direction, DispatchState, SagaState, StepState
from effectusd.core.transition import SagaFacts

# A forward dispatch in these states has sent nothing that may have committed (retry_wait
# only when no attempt is uncertain): it can be canceled instead of waited for.
NOT_SENT = frozenset({DispatchState.QUEUED, DispatchState.RETRY_WAIT})
BLOCKED = frozenset(
    {
        DispatchState.BLOCKED_UNKNOWN,
        DispatchState.BLOCKED_FENCE,
        DispatchState.BLOCKED_CONTRACT,
        DispatchState.BLOCKED_DESTINATION,
    }
)


# The saga state a blocked forward dispatch holds its saga in.
BLOCKS_SAGA_AS = {
    DispatchState.BLOCKED_UNKNOWN: SagaState.BLOCKED_UNKNOWN,
    DispatchState.BLOCKED_FENCE: SagaState.BLOCKED_FENCE,
    DispatchState.BLOCKED_CONTRACT: SagaState.BLOCKED_CONTRACT,
    DispatchState.BLOCKED_DESTINATION: SagaState.BLOCKED_DESTINATION,
}


class Branch(NamedTuple):
    """One step as the decision reads it (a tuple: one is made per step per settlement)."""

    state: StepState
    dispatch: DispatchState | None = None  # its forward dispatch, while in progress
    uncertain: bool = False  # an attempt of that dispatch may have committed
    has_inverse: bool = False
    succeeded_order: int | None = None

    @property
    def not_sent(self) -> bool:
        return (
            self.state is StepState.IN_PROGRESS and self.dispatch in NOT_SENT and not self.uncertain
        )

    @property
    def blocked(self) -> bool:
        return self.state is StepState.IN_PROGRESS and self.dispatch in BLOCKED

    @property
    def live(self) -> bool:
        """Sent or being sent, and not blocked: its outcome is to be waited for."""
        return self.state is StepState.IN_PROGRESS and not self.not_sent and not self.blocked

    @property
    def to_undo(self) -> bool:
        return self.state is StepState.SUCCEEDED and self.has_inverse


class Moves(NamedTuple):
    cancel: tuple[str, ...] = ()  # forward dispatches not yet sent: cancel them
    start: tuple[str, ...] = ()  # steps whose forward dispatch to enqueue now
    compensate: str | None = None  # the step whose compensation to enqueue now
    waiting: tuple[str, ...] = ()  # forward steps in flight, waited for
    blocked: tuple[str, ...] = ()  # forward steps whose dispatch is blocked
    end: SagaState | None = None  # completed, compensated or failed: nothing is left


# A step in one of these states means the saga decided to compensate: nothing starts any more.
UNDONE = frozenset({StepState.FAILED, StepState.COMPENSATING, StepState.COMPENSATED})


def undoing(states: Iterable[StepState], cancel_requested: bool) -> bool:
    """Whether the saga has decided to compensate: from then on nothing starts."""
    return cancel_requested or not UNDONE.isdisjoint(states)


def next_moves(graph: PlanGraph, branches: Mapping[str, Branch], undo: bool) -> Moves:
    """The moves the steps' states call for. Nothing starts and nothing is compensated while
    a branch is blocked (an operator settles it first) or, when undoing, in flight."""
    if not undo:
        states = {name: b.state for name, b in branches.items()}
        return forward_moves(graph, states, {name: b.dispatch for name, b in branches.items()})
    in_order = [(name, branches[name]) for name in graph.order]
    blocked = tuple(name for name, b in in_order if b.blocked)
    cancel = tuple(name for name, b in in_order if b.not_sent)
    waiting = tuple(name for name, b in in_order if b.live)
    if blocked or waiting or any(b.state is StepState.COMPENSATING for _, b in in_order):
        return Moves(cancel=cancel, waiting=waiting, blocked=blocked)
    # What is left once the cancels are done: a canceled step is pending again.
    left = {
        name: Branch(StepState.PENDING, has_inverse=b.has_inverse) if name in cancel else b
        for name, b in branches.items()
    }
    nxt = next_compensation(graph, left)
    if nxt is not None:
        return Moves(cancel=cancel, compensate=nxt)
    return Moves(cancel=cancel, end=_undone(left))


def forward_moves(
    graph: PlanGraph,
    states: Mapping[str, StepState],
    dispatches: Mapping[str, DispatchState | None],
) -> Moves:
    """``next_moves`` going forward, from each step's state and its forward dispatch's (a step
    missing from them is pending): every pending step whose dependencies all succeeded starts,
    unless a branch is blocked; with every step succeeded, the saga is completed. One pass
    over the steps, no Branch made: the recorder asks this of every success."""
    blocked: list[str] = []
    waiting: list[str] = []
    ready: list[str] = []
    done = True
    pending, succeeded = StepState.PENDING, StepState.SUCCEEDED
    for name in graph.order:
        state = states.get(name, pending)
        if state is succeeded:
            continue
        done = False
        if state is StepState.IN_PROGRESS:
            waiting.append(name)
            if dispatches.get(name) in BLOCKED:
                blocked.append(name)
        elif state is pending:
            for dep in graph.deps[name]:
                if states.get(dep, pending) is not succeeded:
                    break
            else:
                ready.append(name)
    if done:
        return Moves(end=SagaState.COMPLETED)
    start = () if blocked else tuple(ready)
    return Moves(start=start, waiting=tuple(waiting), blocked=tuple(blocked))


def next_compensation(graph: PlanGraph, branches: Mapping[str, Branch]) -> str | None:
    """The succeeded step with an inverse that succeeded last, among those no succeeded,
    compensating or running step depends on. A step that depends on another can only have
    started after it succeeded, so the latest success is always free; the dependency check
    keeps the order safe even for a saga whose steps an operator settled out of order."""
    busy = (StepState.IN_PROGRESS, StepState.COMPENSATING)
    free = [
        name
        for name in graph.order
        if branches[name].to_undo
        and not any(
            branches[d].to_undo or branches[d].state in busy for d in graph.descendants[name]
        )
    ]
    if not free:
        return None
    position = {name: index for index, name in enumerate(graph.order)}

    def latest(name: str) -> tuple[int, int]:
        order = branches[name].succeeded_order
        return (-1 if order is None else order, position[name])

    return max(free, key=latest)


def _undone(branches: Mapping[str, Branch]) -> SagaState:
    """How an undone saga ends: compensated when anything was, failed when a step failed and
    nothing needed undoing, compensated (a cancel with nothing to undo) otherwise."""
    states = {b.state for b in branches.values()}
    if StepState.COMPENSATED not in states and StepState.FAILED in states:
        return SagaState.FAILED
    return SagaState.COMPENSATED


def still_blocked(
    graph: PlanGraph, branches: Mapping[str, Branch], settled: str
) -> tuple[SagaState, str] | None:
    """The block a saga stays in once ``settled``'s block is settled (by a late answer or an
    operator) while other branches are still blocked: the state of the first of them in plan
    order, and a reason naming each, so the operator's next command fits the saga's state."""
    others = [
        (name, branches[name]) for name in graph.order if name != settled and branches[name].blocked
    ]
    if not others:
        return None
    named = ", ".join(f"{name} (forward, {b.dispatch})" for name, b in others)
    first = others[0][1].dispatch
    assert first is not None  # a blocked branch has a blocked dispatch
    return BLOCKS_SAGA_AS[first], f"still blocked: {named}"


def branches_of(saga: SagaFacts) -> dict[str, Branch]:
    """The saga's steps as the branch decisions read them, from the facts as loaded."""
    branches = {}
    for step in saga.plan.steps:
        facts = saga.steps.get(step.id)
        inverse = step.compensate is not None
        branches[step.id] = (
            Branch(StepState.PENDING, has_inverse=inverse)
            if facts is None
            else Branch(
                facts.state, facts.dispatch, facts.uncertain, inverse, facts.succeeded_order
            )
        )
    return branches


def sent_again_state(
    saga: SagaFacts, effect_id: str, direction: Direction
) -> tuple[SagaState, str | None]:
    """Where a blocked saga goes when an operator sends ``effect_id``'s blocked dispatch
    again: compensating for a compensation; for a forward dispatch, blocked while another
    branch is, else compensating when the saga decided to compensate (it waits for the
    branch sent again), else running."""
    if direction is Direction.COMPENSATION:
        return SagaState.COMPENSATING, None
    branches = branches_of(saga)
    blocked = still_blocked(saga.plan.graph, branches, effect_id)
    if blocked is not None:
        return blocked
    undo = undoing((b.state for b in branches.values()), saga.cancel_requested)
    return (SagaState.COMPENSATING if undo else SagaState.RUNNING), None

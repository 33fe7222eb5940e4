"""The engine's builder for plans with parallel steps (docs/design.md section 4, "Parallel
steps"; issue 17).

A sequential plan keeps the TransitionBuilder of ``effectusd.core.next_step`` untouched.
Here, after the settled dispatch's own move, what comes next is recomputed from every
step's state (``effectusd.core.branches.next_moves``): the steps that became ready start
together; when the saga undoes, siblings not yet sent are canceled, those in flight are
waited for, and compensation runs one step at a time in the reverse of the order the steps
succeeded. A blocked branch blocks the saga; an answer of a sibling in flight is recorded
but moves nothing else until the block is settled.
"""

from __future__ import annotations

from datetime import timedelta

from effectusd.core.branches import Branch, Moves, next_moves, still_blocked, undoing
from effectusd.core.enqueue import build_dispatch
from effectusd.core.expressions import ResolutionError
from effectusd.core.graph import PlanGraph
from effectusd.core.next_step import TransitionBuilder
from effectusd.core.plan import CheckedStep
from effectusd.core.registry import Registry
from effectusd.core.states import (
    Direction,
    DispatchState,
    OutcomeClass,
    SagaState,
    SettledBy,
    StepState,
)
from effectusd.core.transition import (
    Completion,
    DispatchFacts,
    Event,
    SagaFacts,
)


class ParallelTransitionBuilder(TransitionBuilder):
    def __init__(
        self,
        saga: SagaFacts,
        dispatch: DispatchFacts | None,
        completion: Completion | None,
        registry: Registry,
        actor: str,
    ) -> None:
        super().__init__(saga, dispatch, completion, registry, actor)
        self.graph = PlanGraph.of(saga.plan.steps)
        self.inverse = {s.id: s.compensate is not None for s in saga.plan.steps}
        facts = saga.steps.values()
        self.dispatch_states = {s.effect_id: s.dispatch for s in facts}
        self.uncertain = {s.effect_id: s.uncertain for s in facts}
        # Set when this transition decided to compensate (an operator's cancel of a dispatch
        # not sent leaves no failed step and may carry no cancel request).
        self.undo_started = False

    # -- the settled dispatch ----------------------------------------------------------------
    def dispatch(self, state: DispatchState) -> None:
        super().dispatch(state)
        if self.dispatch_facts.direction is Direction.FORWARD:
            effect = self.dispatch_facts.effect_id
            self.dispatch_states[effect] = state
            self.uncertain[effect] = self.transition.uncertain_attempt is not None

    def retry(self, delay: timedelta) -> None:
        if self._cancels_instead():
            self._cancel_settled()
        else:
            super().retry(delay)

    def block(self, dispatch_state: DispatchState, saga_state: SagaState, reason: str) -> None:
        if self._cancels_instead():
            self._cancel_settled()
            return
        self.dispatch(dispatch_state)
        effect, direction = self.dispatch_facts.effect_id, self.dispatch_facts.direction.value
        others = [
            f"{name} (forward, {self.dispatch_states[name]})"
            for name, branch in self.branches().items()
            if branch.blocked and name != effect
        ]
        also = f"; also blocked: {', '.join(others)}" if others else ""
        self.saga(saga_state, f"{effect} ({direction}): {reason}{also}")
        if self._undoing():
            self._cancel(next_moves(self.graph, self.branches(), True).cancel)

    def _cancels_instead(self) -> bool:
        """A forward sibling that answered "nothing committed" after the saga decided to
        compensate is canceled, not retried or blocked: nothing may start any more, and no
        earlier attempt of it is uncertain."""
        nothing_sent = (
            self.completion.settled_by is SettledBy.GUARD
            or self.completion.outcome is OutcomeClass.RETRYABLE
        )
        return (
            self.dispatch_facts.direction is Direction.FORWARD
            and nothing_sent
            and self.transition.uncertain_attempt is None
            and self._undoing()
        )

    def _cancel_settled(self) -> None:
        self.dispatch(DispatchState.CANCELED)
        self.step(StepState.PENDING)
        self.reconcile()

    # -- what comes next ---------------------------------------------------------------------
    def advance_forward(self, after: CheckedStep) -> None:
        if self.saga_facts.cancel_requested:
            self.start_compensation("canceled on request", failed=False)
        else:
            self.reconcile()

    def continue_compensation(self, after: CheckedStep) -> None:
        self.reconcile()

    def start_compensation(self, reason: str, failed: bool) -> None:
        self.undo_started = True
        self.reconcile(reason)

    def resume_if_unblocked(self) -> None:
        """A blocked saga runs again only when the settled dispatch was the one blocking it
        (a late answer, an operator) and no other branch is blocked; else it stays blocked,
        in the state of a branch still blocked."""
        if self.transition.saga is not None or not self.saga_facts.state.is_blocked:
            return
        if not self._resolves_block():
            return
        blocked = still_blocked(self.graph, self.branches(), self.dispatch_facts.effect_id)
        if blocked is not None:
            self.saga(*blocked)  # the block moves to the branches still blocked
            return
        self.saga(SagaState.COMPENSATING if self._undoing() else SagaState.RUNNING, None)

    def reconcile(self, undo_reason: str | None = None) -> None:
        """Carry out what the steps' states call for now."""
        moves = next_moves(self.graph, self.branches(), self._undoing())
        self._cancel(moves.cancel)
        if self.saga_state.is_blocked and (moves.blocked or not self._resolves_block()):
            return  # the block stands: an operator (or a late answer) settles it first
        if moves.end is not None:
            self.saga(moves.end, undo_reason)
        elif self._undoing():
            if self.saga_state is not SagaState.COMPENSATING:
                self.saga(SagaState.COMPENSATING, undo_reason)
            if moves.compensate is not None:
                self.enqueue_compensation(self.saga_facts.plan.step(moves.compensate))
        else:
            self._start(moves)

    def _start(self, moves: Moves) -> None:
        """Enqueue every ready step, or none: a drifted verb blocks the saga first, and a step
        whose arguments cannot be resolved fails with nothing sent."""
        steps = [self.saga_facts.plan.step(name) for name in moves.start]
        drifted = []
        for step in steps:
            live = self.registry.verbs.get(step.verb)
            if live is None or not live.pins(step.contract_hash):
                why = "is not configured" if live is None else "changed since the plan was checked"
                drifted.append(f"{step.id} (forward): verb {step.verb!r} {why}")
        if drifted:
            self.saga(SagaState.BLOCKED_CONTRACT, "; ".join(drifted))
            return
        if self.saga_state is not SagaState.RUNNING:
            self.saga(SagaState.RUNNING, None)  # a blocked saga whose block was settled
        failures = []
        for step in steps:
            try:
                build_dispatch(
                    self.saga_facts.ref,
                    step,
                    Direction.FORWARD,
                    self.registry,
                    self.saga_facts.facts,
                    self.results,
                )
            except ResolutionError as exc:
                failures.append((step, exc))
        if failures:
            for step, _ in failures:
                self.step(StepState.FAILED, effect_id=step.id, kept=True)
            first, error = failures[0]
            self.reconcile(f"step {first.id!r} could not be dispatched: {error}")
            return
        for step in steps:
            self.enqueue(step, Direction.FORWARD)
            self.dispatch_states[step.id] = DispatchState.QUEUED
            self.uncertain[step.id] = False

    def _cancel(self, names: tuple[str, ...]) -> None:
        for name in names:
            if name in self.transition.cancel_dispatches:
                continue
            previous = self.dispatch_states[name]
            self.transition.cancel_dispatches.append(name)
            self.transition.events.append(
                Event(
                    "dispatch_canceled",
                    name,
                    Direction.FORWARD.value,
                    None,
                    previous.value if previous else None,
                    DispatchState.CANCELED.value,
                    self.actor,
                    None,
                    {"reason": "the saga compensates: a sibling not yet sent is not sent"},
                )
            )
            self.dispatch_states[name] = DispatchState.CANCELED
            self.step(StepState.PENDING, effect_id=name)

    # -- reading the facts -------------------------------------------------------------------
    def branches(self) -> dict[str, Branch]:
        return {
            name: Branch(
                self.step_states.get(name, StepState.PENDING),
                self.dispatch_states.get(name),
                self.uncertain.get(name, False),
                self.inverse[name],
                self.orders.get(name),
            )
            for name in self.graph.order
        }

    def _undoing(self) -> bool:
        return self.undo_started or undoing(self.branches(), self.saga_facts.cancel_requested)

    def _resolves_block(self) -> bool:
        """The settled dispatch is not a sibling in flight: it is the one a block is about
        (settled late or by an operator), or there is none (an operator's resume)."""
        return self.moved is None or self.moved.state is not DispatchState.IN_FLIGHT


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
    again: running (compensating for a compensation) as ever for a sequential plan; with
    parallel steps it stays blocked while another branch is, and a saga that decided to
    compensate goes back to compensating, waiting for the branch sent again."""
    if direction is Direction.COMPENSATION:
        return SagaState.COMPENSATING, None
    if saga.plan.is_sequential:
        return SagaState.RUNNING, None
    branches = branches_of(saga)
    blocked = still_blocked(PlanGraph.of(saga.plan.steps), branches, effect_id)
    if blocked is not None:
        return blocked
    undo = undoing(branches, saga.cancel_requested)
    return (SagaState.COMPENSATING if undo else SagaState.RUNNING), None

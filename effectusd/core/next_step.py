"""What comes next after a settled dispatch: the one builder of an engine Transition.

The engine (``settle``, ``cancel_now``, ``resume_enqueue``) decides which way a saga goes;
this builder records each move as rows-to-be (step and saga updates, timeline events) and
enqueues what the plan's graph calls for next. A sequential plan is a chain (each step after
the one before it), so every plan takes the same path (docs/design.md section 4, "Parallel
steps"): after the settled dispatch's own move, what comes next is read from every step's
state (``effectusd.core.branches.next_moves``). The steps that became ready start together;
when the saga undoes, siblings not yet sent are canceled, those in flight are waited for, and
compensation runs one step at a time in the reverse of the order the steps succeeded. A
blocked branch blocks the saga; an answer of a sibling in flight is recorded but moves
nothing else until the block is settled.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Any, ClassVar

from effectusd.core.branches import (
    Branch,
    Moves,
    forward_moves,
    next_moves,
    still_blocked,
    undoing,
)
from effectusd.core.canonical import JsonValue
from effectusd.core.enqueue import ContractDrift, DispatchSpec, build_dispatch
from effectusd.core.expressions import ResolutionError
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
from effectusd.core.timeline import COMPLETES, SETTLED_TO
from effectusd.core.transition import (
    Completion,
    DispatchFacts,
    Event,
    SagaFacts,
    SagaUpdate,
    Settled,
    StepUpdate,
    Success,
    Transition,
    enqueued_event,
    settled_event,
)


class TransitionBuilder:
    """Accumulates one Transition: the settled dispatch, step and saga moves, and the
    dispatches the plan's graph calls for next (forward, or the next compensation).

    Each move is a timeline entry, made where the move is made: an entry the rows carry
    (effectusd/core/timeline.py: the settlement, the step move of its success, the saga's
    completion, each enqueue and a chain's start) is set on the Transition's fields, every
    other one is a stored event (``Transition.events``)."""

    # False: every entry is a stored event (for a writer that fills no carrying column)
    carry_in_rows: ClassVar[bool] = True

    def __init__(
        self,
        saga: SagaFacts,
        dispatch: DispatchFacts | None,
        completion: Completion | None,
        registry: Registry,
        actor: str,
    ) -> None:
        """``dispatch``: the dispatch this transition moves, None when it moves none (an
        operator resumes a saga); ``completion``: the attempt's end that settles it, None when
        no attempt ended (an operator's cancel of a dispatch never sent)."""
        self.saga_facts = saga
        self.moved = dispatch
        self.ended = completion
        self.registry = registry
        self.graph = saga.plan.graph
        self.transition = Transition(
            dispatch_state=DispatchState.QUEUED if dispatch is None else dispatch.state,
            uncertain_attempt=None if dispatch is None else dispatch.uncertain_attempt,
            last_outcome=None if completion is None else completion.outcome,
            last_error=None if completion is None else completion.error,
        )
        self.results: dict[str, JsonValue] = {}
        self.step_states: dict[str, StepState] = {}
        self.orders: dict[str, int | None] = {}
        self.dispatch_states: dict[str, DispatchState | None] = {}
        self.uncertain: dict[str, bool] = {}
        self.last_order = 0  # of the steps that succeeded so far (0: none)
        for s in saga.steps.values():  # one pass over the steps for all six
            if s.result is not None:
                self.results[s.effect_id] = s.result
            self.step_states[s.effect_id] = s.state
            self.orders[s.effect_id] = s.succeeded_order
            if s.succeeded_order is not None and s.succeeded_order > self.last_order:
                self.last_order = s.succeeded_order
            self.dispatch_states[s.effect_id] = s.dispatch
            self.uncertain[s.effect_id] = s.uncertain
        self.saga_state = saga.state
        self.actor = actor
        # Set when this transition decided to compensate (an operator's cancel of a dispatch
        # not sent leaves no failed step and may carry no cancel request).
        self.undo_started = False
        # the entries so far are the attempt row's settlement and what rides on it, if any
        self.beside_settlement = False

    @property
    def dispatch_facts(self) -> DispatchFacts:
        """The dispatch this transition moves (asked only of a transition that moves one)."""
        if self.moved is None:
            raise ValueError("this transition moves no dispatch")
        return self.moved

    @property
    def completion(self) -> Completion:
        """The attempt's end that settles the dispatch (asked only where an attempt ended)."""
        if self.ended is None:
            raise ValueError("no attempt ended in this transition")
        return self.ended

    # -- the dispatch that completed --------------------------------------------------------
    def dispatch(self, state: DispatchState) -> None:
        moved = self.dispatch_facts
        completion = self.completion
        self.transition.dispatch_state = state
        if (
            self.carry_in_rows
            and moved.state is DispatchState.IN_FLIGHT
            and completion.operator_evidence is None
            and state in SETTLED_TO
            and not self.transition.events
            and self.transition.settled is None
        ):
            self.transition.settled = Settled(state, completion.actor)
            self.beside_settlement = True
        else:
            was, direction = moved.state.value, moved.direction.value
            self._store(settled_event(completion, moved.effect_id, direction, was, state.value))
        if moved.direction is Direction.FORWARD:
            self.dispatch_states[moved.effect_id] = state
            self.uncertain[moved.effect_id] = self.transition.uncertain_attempt is not None

    def note(self, kind: str, detail: Mapping[str, Any]) -> None:
        """A stored timeline event of the settled dispatch, after its settlement."""
        moved = self.dispatch_facts
        completion = self.completion
        self._store(
            Event(
                kind,
                moved.effect_id,
                moved.direction.value,
                completion.attempt,
                actor=completion.actor,
                detail=detail,
            )
        )

    def retry(self, delay: timedelta) -> None:
        if self._cancels_instead():
            self._cancel_settled()
            return
        self.dispatch(DispatchState.RETRY_WAIT)
        self.transition.retry_delay = delay

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

    def fail(self, why: str) -> None:
        """A permanent failure, or known-not-committed with the budget spent: a forward step
        fails and compensation starts; a failed compensation blocks the saga."""
        self.dispatch(DispatchState.FAILED_PERMANENT)
        effect = self.dispatch_facts.effect_id
        if self.dispatch_facts.direction is Direction.FORWARD:
            self.step(StepState.FAILED)
            self.start_compensation(f"step {effect!r} failed: {why}")
        else:
            self.saga(SagaState.BLOCKED_COMPENSATION, f"compensation of {effect!r} failed: {why}")

    def _cancels_instead(self) -> bool:
        """A forward sibling that answered "nothing committed" after the saga decided to
        compensate is canceled, not retried or blocked: nothing may start any more, and no
        earlier attempt of it is uncertain."""
        nothing_sent = (
            self.completion.cause.settled_by is SettledBy.GUARD
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

    # -- steps and saga ---------------------------------------------------------------------
    def step(
        self,
        state: StepState,
        result: JsonValue = None,
        effect_id: str | None = None,
        *,
        kept: bool = False,
    ) -> None:
        """Move a step to ``state``. ``kept``: the step has no dispatch that says it (it failed
        at enqueue), so its row keeps it (``StepUpdate``). A success's result and order go on
        the settled dispatch's row (``Transition.success``)."""
        effect = effect_id or self.dispatch_facts.effect_id
        if state is StepState.SUCCEEDED:
            # The order steps succeeded in is the order they are compensated in, reversed.
            order = self.last_order = self.last_order + 1
            self.orders[effect] = order
            if self.moved is not None and effect == self.moved.effect_id:
                self.transition.success = Success(result, order)
        if kept:
            self.transition.steps.append(StepUpdate(effect, state))
        self._record_step(effect, state, result)

    def _record_step(self, effect: str, state: StepState, result: JsonValue = None) -> None:
        previous = self.step_states.get(effect)
        settled = self.transition.settled if self.beside_settlement else None
        if (
            settled is not None
            and settled.step is None
            and settled.to is DispatchState.SUCCEEDED
            and settled.actor == self.actor
            and effect == self.dispatch_facts.effect_id
            and (previous, state) == COMPLETES[self.dispatch_facts.direction]
        ):
            self.transition.settled = replace(settled, step=state)  # on the attempt row
        else:
            self._store(
                Event(
                    "step_state",
                    effect,
                    from_state=previous.value if previous else None,
                    to_state=state.value,
                    actor=self.actor,
                )
            )
        self.step_states[effect] = state
        if state is StepState.SUCCEEDED:
            self.results[effect] = result

    def saga(self, state: SagaState, reason: str | None) -> None:
        if state is self.saga_state and self.transition.saga is not None:
            return
        if state.is_terminal:
            reason = self._resolved(state, reason)
        settled = self.transition.settled if self.beside_settlement else None
        if (
            settled is not None
            and settled.step is not None
            and settled.actor == self.actor
            and not reason
            and (self.saga_state, state) == (SagaState.RUNNING, SagaState.COMPLETED)
            and not self.transition.new_dispatches
        ):
            self.transition.settled = replace(settled, saga=state)  # on the attempt row
            self.beside_settlement = False
        else:
            detail = {"reason": reason} if reason else {}
            was = self.saga_state.value
            self._store(
                Event("saga_state", None, None, None, was, state.value, self.actor, None, detail)
            )
        self.saga_state = state
        self.transition.saga = SagaUpdate(state, reason)

    def _resolved(self, state: SagaState, reason: str | None) -> str | None:
        """A saga that ends through an operator's resolution says so first: who, and what they
        found out; then why it failed or compensated, if it did. The block's reason it replaces
        stays on the timeline."""
        ended = self.ended
        if ended is None or ended.cause.settled_by is not SettledBy.OPERATOR:
            return reason
        found = "committed" if ended.outcome is OutcomeClass.SUCCESS else "not committed"
        resolved = f"resolved by {ended.actor} as {found}"
        if reason is None and state is SagaState.COMPENSATED:
            reason = self.saga_facts.compensation_reason  # compensation began before the block
        return resolved if reason is None else f"{resolved}; {reason}"

    def resume_if_unblocked(self) -> None:
        """A blocked saga (asked of one only) runs again only when the settled dispatch was
        the one blocking it (a late answer, an operator) and no other branch is blocked; else
        it stays blocked, in the state of a branch still blocked."""
        if self.transition.saga is not None or not self._resolves_block():
            return
        blocked = still_blocked(self.graph, self.branches(), self.dispatch_facts.effect_id)
        if blocked is not None:
            self.saga(*blocked)  # the block moves to the branches still blocked
            return
        self.saga(SagaState.COMPENSATING if self._undoing() else SagaState.RUNNING, None)

    # -- what comes next --------------------------------------------------------------------
    def start_compensation(self, reason: str) -> None:
        self.undo_started = True
        self.reconcile(reason)

    def reconcile(self, undo_reason: str | None = None) -> None:
        """Carry out what the steps' states call for now."""
        undo = self._undoing()
        moves = (
            next_moves(self.graph, self.branches(), True)
            if undo
            else forward_moves(self.graph, self.step_states, self.dispatch_states)
        )
        if moves.cancel:
            self._cancel(moves.cancel)
        if self.saga_state.is_blocked and (moves.blocked or not self._resolves_block()):
            return  # the block stands: an operator (or a late answer) settles it first
        if moves.end is not None:
            self.saga(moves.end, undo_reason)
        elif undo:
            if self.saga_state is not SagaState.COMPENSATING:
                self.saga(SagaState.COMPENSATING, undo_reason)
            if moves.compensate is not None:
                self.enqueue_compensation(self.saga_facts.plan.step(moves.compensate))
        else:
            self._start(moves)

    def _start(self, moves: Moves) -> None:
        """Enqueue every ready step, or none: a drifted verb blocks the saga first, and a step
        whose arguments cannot be resolved fails with nothing sent."""
        built: list[tuple[CheckedStep, DispatchSpec]] = []
        failures: list[tuple[CheckedStep, ResolutionError]] = []
        drifted: list[str] = []
        for name in moves.start:
            step = self.saga_facts.plan.step(name)
            try:
                built.append((step, self._build(step, Direction.FORWARD)))
            except ContractDrift as drift:
                drifted.append(_drifted(step, Direction.FORWARD, drift))
            except ResolutionError as exc:
                failures.append((step, exc))
        if drifted:
            self.saga(SagaState.BLOCKED_CONTRACT, "; ".join(drifted))
            return
        if self.saga_state is not SagaState.RUNNING:
            self.saga(SagaState.RUNNING, None)  # a blocked saga whose block was settled
        if failures:
            for step, _ in failures:
                self.step(StepState.FAILED, effect_id=step.id, kept=True)
            first, error = failures[0]
            self.reconcile(f"step {first.id!r} could not be dispatched: {error}")
            return
        for step, spec in built:
            self._enqueued(step, Direction.FORWARD, spec, alone=len(built) == 1)
            self.dispatch_states[step.id] = DispatchState.QUEUED
            self.uncertain[step.id] = False

    def enqueue_compensation(self, step: CheckedStep) -> None:
        try:
            spec = self._build(step, Direction.COMPENSATION)
        except ContractDrift as drift:
            self.saga(SagaState.BLOCKED_CONTRACT, _drifted(step, Direction.COMPENSATION, drift))
            return
        except ResolutionError as exc:
            self.saga(
                SagaState.BLOCKED_COMPENSATION,
                f"compensation of {step.id!r} could not be dispatched: {exc}",
            )
            return
        self._enqueued(step, Direction.COMPENSATION, spec, alone=True)

    def _build(self, step: CheckedStep, direction: Direction) -> DispatchSpec:
        saga = self.saga_facts
        return build_dispatch(saga, step, direction, self.registry, saga.facts, self.results)

    def _enqueued(
        self, step: CheckedStep, direction: Direction, spec: DispatchSpec, *, alone: bool
    ) -> None:
        """Add the dispatch ``spec`` and its step's move (in progress, or compensating): its
        outbox row carries its enqueue, and the start of its step where that follows the
        settlement and it is the transition's one new dispatch (``alone``: the move enqueues
        no other)."""
        forward = direction is Direction.FORWARD
        state = StepState.IN_PROGRESS if forward else StepState.COMPENSATING
        previous = self.step_states.get(step.id)
        if (
            self.beside_settlement  # not past a carried saga end: that ends it
            and alone
            and previous is not None
            and not self.transition.new_dispatches
        ):
            self.transition.started_from = previous  # on the outbox row
            self.step_states[step.id] = state
            self.beside_settlement = False
        else:
            self._record_step(step.id, state)
        self.transition.new_dispatches.append(spec)
        if self.carry_in_rows:
            self.transition.enqueued_by = self.actor
        else:
            self._store(enqueued_event(spec, self.actor))

    def _cancel(self, names: tuple[str, ...]) -> None:
        for name in names:
            if name in self.transition.cancel_dispatches:
                continue
            previous = self.dispatch_states[name]
            self.transition.cancel_dispatches.append(name)
            self._store(
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

    def _store(self, event: Event) -> None:
        """A timeline entry no row carries: a stored event."""
        self.transition.events.append(event)
        self.beside_settlement = False

    # -- reading the facts -------------------------------------------------------------------
    def branches(self) -> dict[str, Branch]:
        inverse = self.saga_facts.plan.has_inverse
        states, dispatches = self.step_states, self.dispatch_states
        uncertain, orders = self.uncertain, self.orders
        pending = StepState.PENDING
        return {
            name: Branch(
                states.get(name, pending),
                dispatches.get(name),
                uncertain.get(name, False),
                inverse[name],
                orders.get(name),
            )
            for name in self.graph.order
        }

    def _undoing(self) -> bool:
        """Whether the saga has decided to compensate: from then on nothing starts."""
        cancel = self.saga_facts.cancel_requested
        return self.undo_started or undoing(self.step_states.values(), cancel)

    def _resolves_block(self) -> bool:
        """The settled dispatch is not a sibling in flight: it is the one a block is about
        (settled late or by an operator), or there is none (an operator's resume)."""
        return self.moved is None or self.moved.state is not DispatchState.IN_FLIGHT


def _drifted(step: CheckedStep, direction: Direction, drift: ContractDrift) -> str:
    """A saga's block for a verb that cannot be sent as its plan pinned it."""
    return f"{step.id} ({direction.value}): verb {drift.verb!r} {drift.why}"

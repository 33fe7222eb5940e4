"""What comes next after a settled dispatch: the builder of one engine Transition.

The engine (``settle``, ``cancel_now``, ``resume_enqueue``) decides which way a saga goes;
this builder records each move as rows-to-be (step and saga updates, timeline events) and
enqueues the next dispatch of the plan, forward or compensating.
"""

from __future__ import annotations

from datetime import timedelta

from effectusd.core.canonical import JsonValue
from effectusd.core.enqueue import DispatchSpec, build_dispatch
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
from effectusd.core.transition import (
    Completion,
    DispatchFacts,
    Event,
    SagaFacts,
    SagaUpdate,
    StepUpdate,
    Transition,
    enqueued_event,
    settled_event,
)


class TransitionBuilder:
    """Accumulates one Transition: the settled dispatch, step and saga moves, and the
    next dispatch the plan calls for (forward, or the next compensation)."""

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
        self.transition = Transition(
            dispatch_state=DispatchState.QUEUED if dispatch is None else dispatch.state,
            uncertain_attempt=None if dispatch is None else dispatch.uncertain_attempt,
            last_outcome=None if completion is None else completion.outcome,
            last_error=None if completion is None else completion.error,
        )
        self.results: dict[str, JsonValue] = {}
        self.step_states: dict[str, StepState] = {}
        self.orders: dict[str, int | None] = {}
        for s in saga.steps.values():  # one pass over the steps for the three
            if s.result is not None:
                self.results[s.effect_id] = s.result
            self.step_states[s.effect_id] = s.state
            self.orders[s.effect_id] = s.succeeded_order
        self.saga_state = saga.state
        self.actor = actor

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
        self.transition.dispatch_state = state
        self.transition.events.append(
            settled_event(
                self.completion,
                self.dispatch_facts.effect_id,
                self.dispatch_facts.direction.value,
                self.dispatch_facts.state.value,
                state.value,
            )
        )

    def retry(self, delay: timedelta) -> None:
        self.dispatch(DispatchState.RETRY_WAIT)
        self.transition.retry_delay = delay

    def block(self, dispatch_state: DispatchState, saga_state: SagaState, reason: str) -> None:
        self.dispatch(dispatch_state)
        self.saga(
            saga_state,
            f"{self.dispatch_facts.effect_id} ({self.dispatch_facts.direction.value}): {reason}",
        )

    def fail(self, why: str) -> None:
        """A permanent failure, or known-not-committed with the budget spent: a forward step
        fails and compensation starts; a failed compensation blocks the saga."""
        self.dispatch(DispatchState.FAILED_PERMANENT)
        step = self.saga_facts.plan.step(self.dispatch_facts.effect_id)
        if self.dispatch_facts.direction is Direction.FORWARD:
            self.step(StepState.FAILED)
            self.start_compensation(f"step {step.id!r} failed: {why}", failed=True)
        else:
            self.saga(
                SagaState.BLOCKED_COMPENSATION,
                f"compensation of {step.id!r} failed: {why}",
            )

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
        at enqueue), so its row keeps it (see ``StepUpdate.kept``)."""
        effect = effect_id or self.dispatch_facts.effect_id
        order = None
        if state is StepState.SUCCEEDED:
            # The order steps succeeded in is the order they are compensated in, reversed.
            order = 1 + max((o for o in self.orders.values() if o is not None), default=0)
            self.orders[effect] = order
        succeeded = state is StepState.SUCCEEDED
        self.transition.steps.append(
            StepUpdate(effect, state, result, succeeded, succeeded_order=order, kept=kept)
        )
        self._record_step(effect, state, result)

    def _record_step(self, effect: str, state: StepState, result: JsonValue = None) -> None:
        previous = self.step_states.get(effect)
        self.transition.events.append(
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
        self.transition.events.append(
            Event(
                "saga_state",
                None,
                None,
                None,
                self.saga_state.value,
                state.value,
                self.actor,
                None,
                {"reason": reason} if reason else {},
            )
        )
        self.saga_state = state
        self.transition.saga = SagaUpdate(state, reason)

    def _resolved(self, state: SagaState, reason: str | None) -> str | None:
        """A saga that ends through an operator's resolution says so first: who, and what they
        found out; then why it failed or compensated, if it did. The block's reason it replaces
        stays on the timeline."""
        ended = self.ended
        if ended is None or ended.settled_by is not SettledBy.OPERATOR:
            return reason
        found = "committed" if ended.outcome is OutcomeClass.SUCCESS else "not committed"
        resolved = f"resolved by {ended.actor} as {found}"
        if reason is None and state is SagaState.COMPENSATED:
            reason = self.saga_facts.compensation_reason  # compensation began before the block
        return resolved if reason is None else f"{resolved}; {reason}"

    def resume_if_unblocked(self) -> None:
        """A blocked saga whose blocking dispatch was settled (late answer, operator) resumes;
        with one dispatch live at a time, any settled dispatch is the blocking one."""
        if self.saga_facts.state.is_blocked and self.transition.saga is None:
            forward = self.dispatch_facts.direction is Direction.FORWARD
            self.saga(SagaState.RUNNING if forward else SagaState.COMPENSATING, None)

    # -- what comes next --------------------------------------------------------------------
    def advance_forward(self, after: CheckedStep) -> None:
        if self.saga_facts.cancel_requested:
            self.start_compensation("canceled on request", failed=False)
            return
        following = [s for s in self.saga_facts.plan.steps if s.sequence == after.sequence + 1]
        if not following:
            self.saga(SagaState.COMPLETED, None)
            return
        nxt = following[0]
        spec = self.enqueue(nxt, Direction.FORWARD)
        if spec is None:
            return
        if isinstance(spec, ResolutionError):
            self.step(StepState.FAILED, effect_id=nxt.id, kept=True)
            self.start_compensation(f"step {nxt.id!r} could not be dispatched: {spec}", failed=True)

    def start_compensation(self, reason: str, failed: bool) -> None:
        candidates = self.to_compensate(below=None)
        if not candidates:
            if failed:
                self.saga(SagaState.FAILED, reason)
            else:
                self.saga(SagaState.COMPENSATED, reason)
            return
        self.saga(SagaState.COMPENSATING, reason)
        self.enqueue_compensation(candidates[0])

    def continue_compensation(self, after: CheckedStep) -> None:
        candidates = self.to_compensate(below=after.sequence)
        if not candidates:
            self.saga(SagaState.COMPENSATED, None)  # keeps the reason compensation began
            return
        self.enqueue_compensation(candidates[0])

    def to_compensate(self, below: int | None) -> list[CheckedStep]:
        """Succeeded steps with an inverse, highest sequence first."""
        return sorted(
            (
                s
                for s in self.saga_facts.plan.steps
                if s.compensate is not None
                and self.step_states.get(s.id) is StepState.SUCCEEDED
                and (below is None or s.sequence < below)
            ),
            key=lambda s: s.sequence,
            reverse=True,
        )

    def enqueue_compensation(self, step: CheckedStep) -> None:
        spec = self.enqueue(step, Direction.COMPENSATION)
        if isinstance(spec, ResolutionError):
            self.saga(
                SagaState.BLOCKED_COMPENSATION,
                f"compensation of {step.id!r} could not be dispatched: {spec}",
            )

    def enqueue(
        self, step: CheckedStep, direction: Direction
    ) -> DispatchSpec | ResolutionError | None:
        """Add the dispatch for ``step``; None when the saga blocked on contract drift."""
        if direction is Direction.FORWARD:
            verb, pinned = step.verb, step.contract_hash
        elif step.compensate is not None:
            verb, pinned = step.compensate.verb, step.compensate.contract_hash
        else:
            return ResolutionError(f"step {step.id!r} has no compensation")
        live = self.registry.verbs.get(verb)
        if live is None or not live.pins(pinned):
            why = "is not configured" if live is None else "changed since the plan was checked"
            self.saga(
                SagaState.BLOCKED_CONTRACT,
                f"{step.id} ({direction.value}): verb {verb!r} {why}",
            )
            return None
        try:
            spec = build_dispatch(
                self.saga_facts.ref,
                step,
                direction,
                self.registry,
                self.saga_facts.facts,
                self.results,
            )
        except ResolutionError as exc:
            return exc
        self.transition.new_dispatches.append(spec)
        if direction is Direction.FORWARD:
            self.transition.steps.append(StepUpdate(step.id, StepState.IN_PROGRESS))
            self._record_step(step.id, StepState.IN_PROGRESS)
        else:
            self.transition.steps.append(StepUpdate(step.id, StepState.COMPENSATING))
            self._record_step(step.id, StepState.COMPENSATING)
        self.transition.events.append(enqueued_event(spec, self.actor))
        return spec

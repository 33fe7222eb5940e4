"""A pure in-memory driver of one saga: it claims dispatches, feeds outcomes through the real
settlement (guard, late answers, engine) and applies each Transition to its facts the way a
store does, checking the engine's invariants at every step (issue 17, docs/design.md
section 4 "Parallel steps"). Used by the property tests; not a store."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from effectusd.core.answers import PresetClass
from effectusd.core.checker import check
from effectusd.core.contracts import VerbContract
from effectusd.core.enqueue import DispatchSpec, SagaRef, build_dispatch
from effectusd.core.graph import PlanGraph
from effectusd.core.next_step import TransitionBuilder
from effectusd.core.plan import CheckedPlan
from effectusd.core.registry import Registry
from effectusd.core.settlement import (
    AttemptFacts,
    LockedDispatch,
    SettlementFacts,
    Verdict,
    settle_completion,
)
from effectusd.core.states import (
    Delivery,
    Direction,
    DispatchState,
    OutcomeClass,
    SagaState,
    StepState,
)
from effectusd.core.steps import step_state
from effectusd.core.transition import (
    Completion,
    DispatchFacts,
    Event,
    HeldClaim,
    SagaFacts,
    StepFacts,
    Transition,
)

LIVE = frozenset({DispatchState.QUEUED, DispatchState.IN_FLIGHT, DispatchState.RETRY_WAIT})
HELD = LIVE | {
    DispatchState.BLOCKED_UNKNOWN,
    DispatchState.BLOCKED_FENCE,
    DispatchState.BLOCKED_CONTRACT,
    DispatchState.BLOCKED_DESTINATION,
}
# (outcome, the answers preset's class when only the preset classified it, weight)
OUTCOMES: list[tuple[OutcomeClass, PresetClass | None, int]] = [
    (OutcomeClass.SUCCESS, None, 10),
    (OutcomeClass.RETRYABLE, None, 3),
    (OutcomeClass.PERMANENT, None, 2),
    (OutcomeClass.UNKNOWN, None, 2),
    (OutcomeClass.PERMANENT, PresetClass.REFUSED, 1),
    (OutcomeClass.RETRYABLE, PresetClass.DESTINATION, 1),
]
VERBS = {
    verb.name: verb
    for verb in (
        VerbContract(
            name="alo",
            destination="d",
            path="/alo",
            delivery="at_least_once",
            retry={"max_attempts": 3},
        ),
        VerbContract(name="amo", destination="d", path="/amo", retry={"max_attempts": 2}),
    )
}
REGISTRY = Registry(VERBS)


def make_plan(shape: list[tuple[list[int] | None, str, bool]]) -> CheckedPlan:
    """A checked plan from (after as step indexes or None, verb, has an inverse) per step.
    A compensation uses its own step's result; a forward step its dependencies' results."""
    steps: list[dict[str, Any]] = []
    for index, (after, verb, inverse) in enumerate(shape):
        name = f"s{index}"
        step: dict[str, Any] = {"id": name, "verb": verb, "args": {"n": index}}
        step["compensate"] = (
            {"verb": "alo", "args": {"undo": {"$result": name, "path": "/id"}}}
            if inverse
            else "none"
        )
        if after is not None:
            step["after"] = [f"s{i}" for i in after]
            step["args"]["from"] = [{"$result": f"s{i}", "path": "/id"} for i in after]
        steps.append(step)
    return check({"plan_id": "sim", "steps": steps}, VERBS)


@dataclass
class Dispatch:
    id: int
    spec: DispatchSpec
    state: DispatchState = DispatchState.QUEUED
    attempt: int = 0
    uncertain: int | None = None
    later_sent: bool = False

    @property
    def direction(self) -> Direction:
        return Direction(self.spec.direction)

    def facts(self) -> DispatchFacts:
        return DispatchFacts(
            self.id,
            self.spec.effect_id,
            self.direction,
            Delivery(self.spec.delivery),
            self.spec.verb,
            self.state,
            self.attempt,
            self.spec.max_attempts,
            self.uncertain,
        )


@dataclass
class Simulator:
    plan: CheckedPlan
    rng: random.Random
    cancels: bool = False  # an operator may request a cancel at some point
    state: SagaState = SagaState.RUNNING
    cancel_requested: bool = False
    steps: dict[str, StepState] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    orders: dict[str, int] = field(default_factory=dict)
    dispatches: list[Dispatch] = field(default_factory=list)
    trace: list[tuple[str, str, str]] = field(default_factory=list)  # (kind, effect, what)
    succeeded: list[str] = field(default_factory=list)
    compensated: list[str] = field(default_factory=list)
    decided_to_undo: bool = False
    # What the step rows hold: only the moves the engine marks ``kept`` (the rest is read
    # from the dispatches, ``effectusd.core.steps.step_state``).
    kept: dict[str, StepState] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.graph = PlanGraph.of(self.plan.steps)
        self.ref = SagaRef("a" * 64, "default", "sim")
        self.steps = {s.id: StepState.PENDING for s in self.plan.steps}
        for name in self.graph.roots:  # what a submit writes
            spec = build_dispatch(
                self.ref, self.plan.step(name), Direction.FORWARD, REGISTRY, {}, {}
            )
            self._insert(spec)
            self.steps[name] = StepState.IN_PROGRESS
        self._assert_steps_read_from_dispatches()

    # -- driving ---------------------------------------------------------------------------
    def run(self, max_moves: int = 400) -> None:
        for _ in range(max_moves):
            moves = self._possible()
            if not moves:
                break
            self.rng.choice(moves)()
        else:
            raise AssertionError("the saga did not come to rest")
        self.check_at_rest()

    def _possible(self) -> list[Any]:
        moves: list[Any] = []
        for d in self.dispatches:
            if d.state in (DispatchState.QUEUED, DispatchState.RETRY_WAIT):
                moves.append(lambda d=d: self._claim(d))
            elif d.state is DispatchState.IN_FLIGHT:
                moves.append(lambda d=d: self._answer(d, *self._outcome()))
            elif d.state is DispatchState.BLOCKED_UNKNOWN and d.uncertain == d.attempt:
                moves.append(lambda d=d: self._late(d))
        if self.cancels and not self.cancel_requested and not self.state.is_terminal:
            moves.append(self._request_cancel)
        return moves

    def _outcome(self) -> tuple[OutcomeClass, PresetClass | None]:
        chosen = self.rng.choices(OUTCOMES, [weight for *_, weight in OUTCOMES])[0]
        return chosen[0], chosen[1]

    def _claim(self, d: Dispatch) -> None:
        d.attempt += 1
        d.state = DispatchState.IN_FLIGHT
        self._assert_one_live_dispatch_per_step()

    def _request_cancel(self) -> None:
        self.cancel_requested = True
        self.decided_to_undo = True

    def _answer(self, d: Dispatch, outcome: OutcomeClass, preset: PresetClass | None) -> None:
        completion = Completion.answered(
            HeldClaim(d.id, d.attempt, f"t{d.attempt}"),
            outcome,
            result={"id": d.spec.effect_id},
            preset=preset,
        )
        locked = LockedDispatch(d.facts(), f"t{d.attempt}", False)
        self._settle(d, completion, SettlementFacts(locked, AttemptFacts(None, False), self.facts))

    def _late(self, d: Dispatch) -> None:
        """The answer of the attempt whose uncertainty blocked ``d`` arrives after all."""
        outcome = self.rng.choice([OutcomeClass.SUCCESS, OutcomeClass.PERMANENT])
        held = HeldClaim(d.id, d.attempt, "old")
        completion = Completion.answered(held, outcome, result={"id": d.spec.effect_id})
        locked = LockedDispatch(d.facts(), None, False)
        facts = SettlementFacts(locked, AttemptFacts(None, d.later_sent), self.facts)
        self._settle(d, completion, facts)

    def _settle(self, d: Dispatch, completion: Completion, facts: SettlementFacts) -> None:
        settlement = settle_completion(completion, facts, REGISTRY, 0.5)
        assert settlement.verdict is Verdict.APPLY, settlement.why
        assert settlement.transition is not None
        self.trace.append(("settled", d.spec.effect_id, f"{d.direction}:{completion.outcome}"))
        self._apply(d, settlement.transition, every_entry_stored(completion, facts).events)

    # -- the facts, as a store reads them under lock ----------------------------------------
    def facts(self) -> SagaFacts:
        steps = {}
        for s in self.plan.steps:
            live = self._live(s.id, Direction.FORWARD, HELD)
            steps[s.id] = StepFacts(
                s.id,
                s.sequence,
                self.steps[s.id],
                self.results.get(s.id),
                dispatch=live.state if live else None,
                uncertain=bool(live and live.uncertain is not None),
                succeeded_order=self.orders.get(s.id),
            )
        return SagaFacts(
            "a" * 64, "default", "sim", self.state, self.cancel_requested, self.plan, {}, steps
        )

    def _live(self, effect: str, direction: Direction, states: frozenset[Any]) -> Dispatch | None:
        found = [
            d
            for d in self.dispatches
            if d.spec.effect_id == effect and d.direction is direction and d.state in states
        ]
        assert len(found) <= 1, f"two dispatches of {effect} ({direction}) at once"
        return found[0] if found else None

    # -- applying a Transition, checking what it may do --------------------------------------
    def _apply(self, d: Dispatch, transition: Transition, every: list[Event]) -> None:
        """``every``: the transition's timeline, each entry a stored event (step moves
        included: the store reads them from the dispatch rows, ``_assert_steps_read_...``)."""
        if self.state.is_blocked and d.state is DispatchState.IN_FLIGHT:
            # A sibling's answer while the saga is blocked moves nothing else: the block
            # stands until its own dispatch is settled (late answer, operator).
            assert not transition.new_dispatches, "enqueued while the saga is blocked"
            assert transition.saga is None or transition.saga.state.is_blocked, "unblocked"
        if self.decided_to_undo and d.direction is Direction.FORWARD:
            # Once undoing, a forward step is sent again only to learn an uncertain answer.
            retried = transition.dispatch_state is DispatchState.RETRY_WAIT
            assert not retried or transition.uncertain_attempt is not None, "forward retried"
        d.state = transition.dispatch_state
        d.uncertain = transition.uncertain_attempt
        for name in transition.cancel_dispatches:
            target = self._live(name, Direction.FORWARD, HELD)
            assert target is not None and target.state in (
                DispatchState.QUEUED,
                DispatchState.RETRY_WAIT,
            ), f"cancel of {name}: it may have been sent"
            assert target.uncertain is None, f"cancel of {name}: an attempt is uncertain"
            target.state = DispatchState.CANCELED
            self.trace.append(("canceled", name, "forward"))
        before = {}  # each enqueued step's state just before its enqueue, in update order
        success = transition.success
        if success is not None:
            # the store writes them on the row of the dispatch this transition settles
            assert d.direction is Direction.FORWARD, "a compensation's result stored"
            assert d.state is DispatchState.SUCCEEDED, "a result without a success"
        moves = [e for e in every if e.kind == "step_state"]
        for update in transition.steps:  # kept on the step row: a move of this transition
            assert (update.effect_id, update.state.value) in {
                (e.effect_id, e.to_state) for e in moves
            }
            self.kept[update.effect_id] = update.state
        for move in moves:
            effect, state = move.effect_id or "", StepState(move.to_state)
            if state in (StepState.IN_PROGRESS, StepState.COMPENSATING):
                before[effect] = self.steps[effect]
            ours = success is not None and state is StepState.SUCCEEDED
            if ours:
                assert effect == d.spec.effect_id, "a result for another step"
            assert not (state is StepState.SUCCEEDED and not ours), "a success without a result"
            self._step(
                effect, state, success.result if ours else None, success.order if ours else None
            )
        for spec in transition.new_dispatches:
            self._check_enqueue(spec, before[spec.effect_id])
            self._insert(spec)
        if transition.saga is not None:
            self.state = transition.saga.state
            self.trace.append(("saga", "", self.state.value))
            if self.state is SagaState.COMPENSATING:
                self.decided_to_undo = True
        self._assert_one_live_dispatch_per_step()
        self._assert_steps_read_from_dispatches()
        blocked = [x.spec.effect_id for x in self.dispatches if x.state in HELD - LIVE]
        assert not blocked or self.state.is_blocked, f"{blocked} blocked, the saga {self.state}"

    def _step(self, effect: str, state: StepState, result: Any, order: int | None) -> None:
        if state is StepState.FAILED:
            self.decided_to_undo = True
        if state is StepState.SUCCEEDED:
            self.results[effect] = result
            self.succeeded.append(effect)
            if order is not None:
                assert order > max(self.orders.values(), default=0)
                self.orders[effect] = order
        if state is StepState.COMPENSATED:
            self.compensated.append(effect)
        self.steps[effect] = state

    def _check_enqueue(self, spec: DispatchSpec, was: StepState) -> None:
        """``was``: the step's state just before its enqueue (the others' are after it)."""
        effect, direction = spec.effect_id, Direction(spec.direction)
        self.trace.append(("enqueued", effect, direction.value))
        if direction is Direction.FORWARD:
            assert not self.decided_to_undo, f"{effect} enqueued after the saga chose to undo"
            assert was is StepState.PENDING
            assert all(self.steps[dep] is StepState.SUCCEEDED for dep in self.graph.deps[effect])
            return
        assert was is StepState.SUCCEEDED, f"compensation of {effect}: it did not succeed"
        for other in self.graph.descendants[effect]:
            undone_first = self.plan.step(other).compensate is None or self.steps[other] in (
                StepState.PENDING,
                StepState.FAILED,
                StepState.COMPENSATED,
            )
            assert undone_first, f"{effect} compensated before its dependent {other}"
        live_forward = [
            d for d in self.dispatches if d.direction is Direction.FORWARD and d.state in LIVE
        ]
        assert not live_forward, f"compensation of {effect} while a forward step is live"
        later = [
            s
            for s in self.succeeded
            if (s == effect or self.steps[s] is StepState.SUCCEEDED)
            and self.plan.step(s).compensate is not None
        ]
        assert later and later[-1] == effect, f"{effect} is not the latest success: {later}"

    def _insert(self, spec: DispatchSpec) -> None:
        assert self._live(spec.effect_id, Direction(spec.direction), HELD) is None
        self.dispatches.append(Dispatch(len(self.dispatches) + 1, spec))

    def _assert_steps_read_from_dispatches(self) -> None:
        """Every step's state as a reader derives it from its dispatches (and the step row's
        kept state) is the state the engine's step moves put it in, after every move."""
        for s in self.plan.steps:
            latest: dict[Direction, DispatchState] = {}
            for d in self.dispatches:
                if d.spec.effect_id == s.id:
                    latest[d.direction] = d.state
            derived = step_state(
                latest.get(Direction.FORWARD),
                latest.get(Direction.COMPENSATION),
                self.kept.get(s.id, StepState.PENDING),
            )
            assert derived is self.steps[s.id], f"{s.id}: read {derived}, moved {self.steps[s.id]}"

    def _assert_one_live_dispatch_per_step(self) -> None:
        for s in self.plan.steps:
            for direction in Direction:
                self._live(s.id, direction, HELD)

    # -- at rest -----------------------------------------------------------------------------
    def check_at_rest(self) -> None:
        """Nothing more can happen: the saga ended, or it is blocked for an operator."""
        assert self.state.is_terminal or self.state.is_blocked, self.state
        if not self.state.is_terminal:
            return
        assert not [d for d in self.dispatches if d.state in HELD]
        if self.state is SagaState.COMPLETED:
            assert set(self.steps.values()) == {StepState.SUCCEEDED}
            assert not self.decided_to_undo
            return
        for s in self.plan.steps:
            state = self.steps[s.id]
            assert state not in (StepState.IN_PROGRESS, StepState.COMPENSATING), s.id
            if s.compensate is not None:
                assert state is not StepState.SUCCEEDED, f"{s.id} was never compensated"
        undone = [s for s in self.compensated]
        expected = [s for s in reversed(self.succeeded) if s in undone]
        assert undone == expected, "compensation order is not the reverse of success order"


def every_entry_stored(completion: Completion, facts: SettlementFacts) -> Transition:
    """The transition ``settle_completion`` makes of ``completion``, built with every timeline
    entry a stored event (``TransitionBuilder.carry_in_rows`` off): the full event list."""
    TransitionBuilder.carry_in_rows = False
    try:
        settlement = settle_completion(completion, facts, REGISTRY, 0.5)
    finally:
        TransitionBuilder.carry_in_rows = True
    assert settlement.transition is not None
    return settlement.transition

"""The engine on plans with parallel steps (docs/design.md section 4, "Parallel steps"):
fan-out, join, the failure rules of the worked example, blocking and resuming. Pure: facts
in, a Transition out."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from effectusd.core.branches import Branch, next_moves
from effectusd.core.checker import check
from effectusd.core.engine import cancel_now, resume_enqueue, settle
from effectusd.core.graph import PlanGraph
from effectusd.core.plan import CheckedPlan
from effectusd.core.registry import Registry
from effectusd.core.states import (
    Delivery,
    Direction,
    DispatchState,
    OutcomeClass,
    SagaState,
    StepState,
)
from effectusd.core.transition import (
    Completion,
    DispatchFacts,
    HeldClaim,
    SagaFacts,
    StepFacts,
    Transition,
)
from tests.unit.saga_simulator import REGISTRY, VERBS

Steps = dict[str, tuple[StepState, DispatchState | None, int | None]]
P, RUN, OK = StepState.PENDING, StepState.IN_PROGRESS, StepState.SUCCEEDED
Q, FLY, RW = DispatchState.QUEUED, DispatchState.IN_FLIGHT, DispatchState.RETRY_WAIT


def undoable(name: str, after: list[str] | None, verb: str = "alo", **args: Any) -> dict[str, Any]:
    step: dict[str, Any] = {
        "id": name,
        "verb": verb,
        "args": {"n": name, **args},
        "compensate": {"verb": "alo", "args": {"undo": {"$result": name, "path": "/id"}}},
    }
    if after is not None:
        step["after"] = after
    return step


def shop() -> CheckedPlan:
    """The worked example: hold, then three reservations and a notice in parallel, then
    charge after the reservations."""
    notify = {"id": "notify", "verb": "amo", "args": {}, "compensate": "none", "after": ["hold"]}
    return check(
        {
            "plan_id": "shop",
            "steps": [
                undoable("hold", None),
                undoable("reserve-a", ["hold"], verb="amo"),
                undoable("reserve-b", ["hold"]),
                undoable("reserve-c", ["hold"]),
                notify,
                undoable("charge", ["reserve-a", "reserve-b", "reserve-c"]),
            ],
        },
        VERBS,
    )


def facts(
    plan: CheckedPlan,
    steps: Steps,
    state: SagaState = SagaState.RUNNING,
    cancel_requested: bool = False,
) -> SagaFacts:
    """Steps not named are pending; (state, forward dispatch state, succeeded order)."""
    rows = {}
    for s in plan.steps:
        step_state, dispatch, order = steps.get(s.id, (P, None, None))
        result = {"id": f"{s.id}-1"} if order is not None else None
        rows[s.id] = StepFacts(s.id, s.sequence, step_state, result, dispatch, False, order)
    return SagaFacts("s" * 64, "default", "x", state, cancel_requested, plan, {}, rows)


def forward(effect: str, state: DispatchState = FLY, delivery: str = "alo") -> DispatchFacts:
    mode = Delivery.AT_LEAST_ONCE if delivery == "alo" else Delivery.AT_MOST_ONCE
    return DispatchFacts(7, effect, Direction.FORWARD, mode, delivery, state, 1, 3, None)


def answer(outcome: OutcomeClass, effect: str = "x") -> Completion:
    held = HeldClaim(7, 1, "t")
    return Completion.answered(held, outcome, result={"id": f"{effect}-1"}, error="declined")


def enqueued(transition: Transition) -> list[tuple[str, str]]:
    return [(d.effect_id, d.direction) for d in transition.new_dispatches]


def saga_state(transition: Transition) -> SagaState | None:
    return transition.saga.state if transition.saga else None


def test_steps_whose_dependencies_all_succeeded_are_enqueued_together() -> None:
    plan = shop()
    transition = settle(
        answer(OutcomeClass.SUCCESS, "hold"),
        forward("hold"),
        facts(plan, {"hold": (RUN, FLY, None)}),
        REGISTRY,
        0.5,
    )
    assert enqueued(transition) == [
        ("reserve-a", "forward"),
        ("reserve-b", "forward"),
        ("reserve-c", "forward"),
        ("notify", "forward"),
    ]
    assert transition.success is not None and transition.success.order == 1  # hold's row
    assert transition.saga is None


def test_a_join_waits_for_every_dependency_then_starts() -> None:
    plan = shop()
    steps: Steps = {
        "hold": (OK, None, 1),
        "reserve-a": (OK, None, 2),
        "reserve-b": (RUN, FLY, None),
        "reserve-c": (OK, None, 3),
        "notify": (OK, None, 4),
    }
    first = settle(
        answer(OutcomeClass.SUCCESS, "b"), forward("reserve-b"), facts(plan, steps), REGISTRY, 0.5
    )
    assert enqueued(first) == [("charge", "forward")]
    assert first.success is not None and first.success.order == 5
    steps["reserve-b"], steps["reserve-a"] = (OK, None, 5), (RUN, FLY, None)
    waiting = settle(
        answer(OutcomeClass.RETRYABLE), forward("reserve-a"), facts(plan, steps), REGISTRY, 0.5
    )
    assert enqueued(waiting) == [] and waiting.dispatch_state is RW and waiting.saga is None


def test_the_last_step_to_succeed_completes_the_saga() -> None:
    plan = shop()
    steps: Steps = {s.id: (OK, None, i + 1) for i, s in enumerate(plan.steps)}
    steps["charge"] = (RUN, FLY, None)
    transition = settle(
        answer(OutcomeClass.SUCCESS), forward("charge"), facts(plan, steps), REGISTRY, 0.5
    )
    assert saga_state(transition) is SagaState.COMPLETED and enqueued(transition) == []


# -- the worked example of docs/design.md: reserve-c fails ---------------------------------------


def test_a_failed_branch_cancels_siblings_not_sent_and_waits_for_those_in_flight() -> None:
    plan = shop()
    steps: Steps = {
        "hold": (OK, None, 1),
        "reserve-a": (RUN, FLY, None),  # in flight: waited for
        "reserve-b": (OK, None, 2),
        "reserve-c": (RUN, FLY, None),  # fails now
        "notify": (RUN, Q, None),  # queued, never sent: canceled
    }
    transition = settle(
        answer(OutcomeClass.PERMANENT), forward("reserve-c"), facts(plan, steps), REGISTRY, 0.5
    )
    assert transition.dispatch_state is DispatchState.FAILED_PERMANENT
    assert transition.cancel_dispatches == ["notify"]
    assert enqueued(transition) == []  # reserve-a is still in flight: nothing compensates yet
    assert saga_state(transition) is SagaState.COMPENSATING
    assert transition.saga and "reserve-c" in (transition.saga.stop_reason or "")
    moved = {(e.effect_id, e.to_state) for e in transition.events if e.kind == "step_state"}
    assert moved == {("reserve-c", StepState.FAILED), ("notify", P)}
    kinds = [(e.kind, e.effect_id) for e in transition.events]
    assert ("dispatch_canceled", "notify") in kinds


def test_the_waited_for_success_is_compensated_first_then_in_reverse_success_order() -> None:
    plan = shop()
    steps: Steps = {
        "hold": (OK, None, 1),
        "reserve-a": (RUN, FLY, None),
        "reserve-b": (OK, None, 2),
        "reserve-c": (StepState.FAILED, None, None),
    }
    compensating = facts(plan, steps, SagaState.COMPENSATING)
    transition = settle(
        answer(OutcomeClass.SUCCESS, "reserve-a"),
        forward("reserve-a", delivery="amo"),
        compensating,
        REGISTRY,
        0.5,
    )
    assert enqueued(transition) == [("reserve-a", "compensation")]
    assert transition.saga is None  # already compensating
    order = []
    steps["reserve-a"] = (OK, None, 3)
    for _ in range(3):
        current = facts(plan, steps, SagaState.COMPENSATING)
        nxt = next_of(plan, current)
        order.append(nxt)
        steps[nxt] = (StepState.COMPENSATED, None, steps[nxt][2])
    assert order == ["reserve-a", "reserve-b", "hold"]
    done = compensation_done(
        plan,
        facts(plan, steps | {"hold": (StepState.COMPENSATING, None, 1)}, SagaState.COMPENSATING),
        "hold",
    )
    assert saga_state(done) is SagaState.COMPENSATED


def next_of(plan: CheckedPlan, saga: SagaFacts) -> str:
    """The compensation the engine enqueues after the one in progress is done."""
    transition = resume_enqueue(saga, REGISTRY, "test")
    (only,) = enqueued(transition)
    assert only[1] == "compensation"
    return only[0]


def compensation_done(plan: CheckedPlan, saga: SagaFacts, effect: str) -> Transition:
    dispatch = replace(forward(effect), direction=Direction.COMPENSATION)
    return settle(answer(OutcomeClass.SUCCESS), dispatch, saga, REGISTRY, 0.5)


def test_a_sibling_answering_not_committed_after_the_failure_is_canceled_not_retried() -> None:
    plan = shop()
    steps: Steps = {
        "hold": (OK, None, 1),
        "reserve-b": (RUN, FLY, None),
        "reserve-c": (StepState.FAILED, None, None),
    }
    transition = settle(
        answer(OutcomeClass.RETRYABLE),
        forward("reserve-b"),
        facts(plan, steps, SagaState.COMPENSATING),
        REGISTRY,
        0.5,
    )
    assert transition.dispatch_state is DispatchState.CANCELED
    assert enqueued(transition) == [("hold", "compensation")]


def test_an_unknown_sibling_follows_the_delivery_rule_and_blocks_naming_each_branch() -> None:
    plan = shop()
    steps: Steps = {
        "hold": (OK, None, 1),
        "reserve-a": (RUN, FLY, None),
        "reserve-b": (RUN, DispatchState.BLOCKED_UNKNOWN, None),
        "reserve-c": (StepState.FAILED, None, None),
    }
    saga = facts(plan, steps, SagaState.BLOCKED_UNKNOWN)
    transition = settle(
        answer(OutcomeClass.UNKNOWN), forward("reserve-a", delivery="amo"), saga, REGISTRY, 0.5
    )
    assert transition.dispatch_state is DispatchState.BLOCKED_UNKNOWN
    reason = transition.saga.stop_reason if transition.saga else ""
    assert reason and reason.startswith("reserve-a (forward): at_most_once")
    assert "also blocked: reserve-b (forward, blocked_unknown)" in reason


def test_while_blocked_a_sibling_answer_is_recorded_and_moves_nothing_else() -> None:
    plan = shop()
    steps: Steps = {
        "hold": (OK, None, 1),
        "reserve-a": (RUN, DispatchState.BLOCKED_UNKNOWN, None),
        "reserve-b": (OK, None, 2),
        "reserve-c": (RUN, FLY, None),
        "notify": (OK, None, 3),
    }
    saga = facts(plan, steps, SagaState.BLOCKED_UNKNOWN)
    sibling = settle(answer(OutcomeClass.SUCCESS), forward("reserve-c"), saga, REGISTRY, 0.5)
    assert (sibling.dispatch_state, sibling.saga, enqueued(sibling)) == (
        DispatchState.SUCCEEDED,
        None,
        [],
    )
    # the late answer of the blocked branch settles the block: the saga runs on, charge starts
    steps["reserve-c"] = (OK, None, 4)
    late = settle(
        answer(OutcomeClass.SUCCESS),
        forward("reserve-a", DispatchState.BLOCKED_UNKNOWN, "amo"),
        facts(plan, steps, SagaState.BLOCKED_UNKNOWN),
        REGISTRY,
        0.5,
    )
    assert saga_state(late) is SagaState.RUNNING and enqueued(late) == [("charge", "forward")]


def test_a_drifted_verb_blocks_before_any_ready_step_is_enqueued_and_resume_starts_them() -> None:
    plan = shop()
    drifted = Registry({**VERBS, "amo": VERBS["amo"].model_copy(update={"path": "/moved"})})
    steps: Steps = {"hold": (RUN, FLY, None)}
    transition = settle(
        answer(OutcomeClass.SUCCESS), forward("hold"), facts(plan, steps), drifted, 0.5
    )
    assert enqueued(transition) == [] and saga_state(transition) is SagaState.BLOCKED_CONTRACT
    reason = transition.saga.stop_reason if transition.saga else ""
    assert reason and "reserve-a (forward)" in reason and "notify (forward)" in reason
    blocked = facts(plan, {"hold": (OK, None, 1)}, SagaState.BLOCKED_CONTRACT)
    resumed = resume_enqueue(blocked, REGISTRY, "operator")
    assert saga_state(resumed) is SagaState.RUNNING and len(enqueued(resumed)) == 4


def test_a_sibling_settling_under_an_enqueue_time_block_keeps_the_saga_blocked() -> None:
    plan = shop()
    steps: Steps = {"hold": (OK, None, 1), "reserve-a": (RUN, FLY, None)}
    saga = facts(plan, steps, SagaState.BLOCKED_CONTRACT)
    transition = settle(
        answer(OutcomeClass.SUCCESS), forward("reserve-a", delivery="amo"), saga, REGISTRY, 0.5
    )
    assert transition.saga is None and enqueued(transition) == []


def test_a_ready_step_that_cannot_be_resolved_fails_alone_and_nothing_of_its_round_starts() -> None:
    plan = check(
        {
            "plan_id": "p",
            "steps": [
                undoable("a", None),
                undoable("b", ["a"], x={"$result": "a", "path": "/missing"}),
                undoable("c", ["a"]),
            ],
        },
        VERBS,
    )
    transition = settle(
        answer(OutcomeClass.SUCCESS, "a"),
        forward("a"),
        facts(plan, {"a": (RUN, FLY, None)}),
        REGISTRY,
        0.5,
    )
    assert enqueued(transition) == [("a", "compensation")]
    # b has no dispatch to say it failed: its row keeps it; every other move is read from
    # the dispatch rows (effectusd.core.steps)
    kept = {(u.effect_id, u.state) for u in transition.steps}
    assert kept == {("b", StepState.FAILED)}
    assert transition.saga and "step 'b' could not be dispatched" in (
        transition.saga.stop_reason or ""
    )


def test_an_operator_cancel_of_one_branch_cancels_the_others_not_sent() -> None:
    plan = shop()
    steps: Steps = {
        "hold": (OK, None, 1),
        "reserve-a": (RUN, Q, None),
        "reserve-b": (RUN, RW, None),
        "reserve-c": (RUN, FLY, None),
    }
    transition = cancel_now(
        facts(plan, steps), forward("reserve-a", Q), REGISTRY, "canceled by ops", "ops"
    )
    assert transition.dispatch_state is DispatchState.CANCELED
    assert transition.cancel_dispatches == ["reserve-b"]
    assert saga_state(transition) is SagaState.COMPENSATING and enqueued(transition) == []


def test_nothing_starts_while_a_branch_is_blocked() -> None:
    graph = PlanGraph.of(shop().steps)
    branches = {name: Branch(P) for name in graph.order}
    branches["hold"] = Branch(OK, succeeded_order=1)
    branches["reserve-a"] = Branch(RUN, DispatchState.BLOCKED_FENCE)
    moves = next_moves(graph, branches, undo=False)
    assert moves.start == () and moves.blocked == ("reserve-a",)
    branches["reserve-a"] = Branch(RUN, FLY)
    assert next_moves(graph, branches, undo=False).start == ("reserve-b", "reserve-c", "notify")

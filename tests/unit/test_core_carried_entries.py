"""Which timeline entries a transition's rows carry, as the builder says where it makes each
move (``Transition.settled``, ``enqueued_by``, ``started_from``; effectusd/core/timeline.py),
and which stay stored events (``Transition.events``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from effectusd.core.checker import check
from effectusd.core.engine import settle
from effectusd.core.next_step import TransitionBuilder
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
    Settled,
    StepFacts,
    Success,
)

OK, RUN, WAIT = StepState.SUCCEEDED, StepState.IN_PROGRESS, StepState.PENDING


def chain(registry: Registry, states: dict[str, StepState]) -> SagaFacts:
    steps = [
        {"id": name, "verb": "ship", "args": {"n": n}, "compensate": {"verb": "ship", "args": {}}}
        for n, name in enumerate(states)
    ]
    checked = check({"plan_id": "p", "steps": steps}, registry.verbs)
    orders = {name: n + 1 for n, (name, state) in enumerate(states.items()) if state is OK}
    return SagaFacts(
        "s" * 64,
        "default",
        "x",
        SagaState.RUNNING,
        False,
        checked,
        {},
        {
            s.id: StepFacts(s.id, s.sequence, states[s.id], succeeded_order=orders.get(s.id))
            for s in checked.steps
        },
    )


def in_flight(effect: str, state: DispatchState = DispatchState.IN_FLIGHT) -> DispatchFacts:
    return DispatchFacts(
        7, effect, Direction.FORWARD, Delivery.AT_LEAST_ONCE, "ship", state, 1, 3, None
    )


def answered(outcome: OutcomeClass, **more: Any) -> Completion:
    return Completion.answered(HeldClaim(7, 1, "t"), outcome, result={"id": 1}, **more)


def test_a_chain_steps_success_stores_no_event_its_rows_carry_every_move(
    core_registry: Registry,
) -> None:
    facts = chain(core_registry, {"a": OK, "b": RUN, "c": WAIT})
    moved = settle(answered(OutcomeClass.SUCCESS), in_flight("b"), facts, core_registry, 0.5)
    assert moved.events == []
    assert moved.settled == Settled(DispatchState.SUCCEEDED, "engine", OK)
    assert (moved.started_from, moved.enqueued_by) == (WAIT, "engine")
    assert [spec.effect_id for spec in moved.new_dispatches] == ["c"]
    assert moved.success == Success({"id": 1}, 2)  # on b's dispatch row
    assert moved.steps == []  # no step row: every move is read from the dispatch rows


def test_the_success_that_ends_a_saga_carries_its_completion(core_registry: Registry) -> None:
    facts = chain(core_registry, {"a": OK, "b": RUN})
    moved = settle(answered(OutcomeClass.SUCCESS), in_flight("b"), facts, core_registry, 0.5)
    assert moved.events == [] and moved.new_dispatches == []
    assert moved.settled == Settled(DispatchState.SUCCEEDED, "engine", OK, SagaState.COMPLETED)


def test_a_failure_carries_its_settlement_and_stores_the_moves_that_say_why(
    core_registry: Registry,
) -> None:
    facts = chain(core_registry, {"a": OK, "b": RUN})
    moved = settle(answered(OutcomeClass.PERMANENT), in_flight("b"), facts, core_registry, 0.5)
    assert moved.settled == Settled(DispatchState.FAILED_PERMANENT, "engine")
    # b failed, the saga compensates (with its reason), a starts compensating: stored; a's
    # compensation is enqueued on its row, after that stored start
    assert [(e.kind, e.effect_id, e.to_state) for e in moved.events] == [
        ("step_state", "b", "failed"),
        ("saga_state", None, "compensating"),
        ("step_state", "a", "compensating"),
    ]
    assert (moved.started_from, moved.enqueued_by) == (None, "engine")


def test_a_settlement_no_row_can_give_back_the_same_is_stored(core_registry: Registry) -> None:
    """Of a dispatch not in flight (a late answer, an operator's resolution: the attempt row
    is settled already), or with an operator's evidence: stored, and nothing rides on it."""
    facts = chain(core_registry, {"a": OK, "b": RUN, "c": WAIT})
    blocked = replace(facts, state=SagaState.BLOCKED_UNKNOWN)
    late = in_flight("b", DispatchState.BLOCKED_UNKNOWN)
    resolved = Completion.resolved(late, True, {"id": 1}, "ana", "ledger")
    for dispatch, completion, saga in (
        (late, answered(OutcomeClass.SUCCESS), blocked),
        (in_flight("b"), resolved, facts),
    ):
        moved = settle(completion, dispatch, saga, core_registry, 0.5)
        assert moved.settled is None and moved.started_from is None
        kinds = [(e.kind, e.effect_id) for e in moved.events]
        assert kinds[:2] == [("attempt_settled", "b"), ("step_state", "b")]
        assert ("step_state", "c") in kinds and moved.enqueued_by == completion.actor


def test_with_nothing_carried_every_entry_is_a_stored_event(
    core_registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    facts = chain(core_registry, {"a": OK, "b": RUN, "c": WAIT})
    carried = settle(answered(OutcomeClass.SUCCESS), in_flight("b"), facts, core_registry, 0.5)
    monkeypatch.setattr(TransitionBuilder, "carry_in_rows", False)
    stored = settle(answered(OutcomeClass.SUCCESS), in_flight("b"), facts, core_registry, 0.5)
    assert [(e.kind, e.effect_id, e.from_state, e.to_state) for e in stored.events] == [
        ("attempt_settled", "b", "in_flight", "succeeded"),
        ("step_state", "b", "in_progress", "succeeded"),
        ("step_state", "c", "pending", "in_progress"),
        ("dispatch_enqueued", "c", None, "queued"),
    ]
    assert (stored.settled, stored.started_from, stored.enqueued_by) == (None, None, None)
    assert stored.success == carried.success and stored.new_dispatches == carried.new_dispatches

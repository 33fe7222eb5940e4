"""Operator decisions: which action each saga/dispatch state allows, the refusal texts, the
fresh-budget rule, and the engine entry points operator actions reuse (cancel_now,
resume_enqueue)."""

from __future__ import annotations

from typing import Any

import pytest

from effectusd.core.checker import check
from effectusd.core.engine import DispatchFacts, SagaFacts, StepFacts, cancel_now, resume_enqueue
from effectusd.core.operator_decisions import (
    Action,
    CancelEffect,
    RefusalKind,
    Refused,
    Resolution,
    allowed_actions,
    cancel_effect,
    cancel_offered,
    cancel_reason,
    committed_result,
    contract_actions,
    contract_refusal,
    fresh_budget,
    offered_actions,
    optional_evidence,
    required_evidence,
    resolution,
    resolution_refusal,
    resolutions,
    resolve_target,
    resumed_state,
    resumed_stop_reason,
    retry_target,
    saga_refusal,
)
from effectusd.core.registry import Registry
from effectusd.core.states import (
    Delivery,
    Direction,
    DispatchState,
    SagaState,
    StepState,
)

SAGA = "a" * 64
F = Direction.FORWARD
C = Direction.COMPENSATION


def dispatch(
    dispatch_id: int,
    effect: str,
    state: DispatchState,
    direction: Direction = F,
    attempt: int = 1,
    uncertain: int | None = None,
) -> DispatchFacts:
    return DispatchFacts(
        dispatch_id=dispatch_id,
        effect_id=effect,
        direction=direction,
        delivery=Delivery.AT_MOST_ONCE,
        verb="charge",
        state=state,
        attempt=attempt,
        max_attempts=3,
        uncertain_attempt=uncertain,
    )


# -- which actions each saga state allows --------------------------------------------------

ALLOWED = [
    (SagaState.RUNNING, {Action.CANCEL}),
    (SagaState.COMPENSATING, set()),
    (SagaState.COMPLETED, {Action.PRUNE}),
    (SagaState.COMPENSATED, {Action.PRUNE}),
    (SagaState.FAILED, {Action.PRUNE}),
    (SagaState.BLOCKED_UNKNOWN, {Action.RESOLVE}),
    (SagaState.BLOCKED_FENCE, {Action.RETRY}),
    (SagaState.BLOCKED_CONTRACT, {Action.RETRY}),
    (SagaState.BLOCKED_COMPENSATION, {Action.RETRY, Action.RESOLVE}),
    (SagaState.BLOCKED_DESTINATION, {Action.RETRY, Action.CANCEL}),
]


def test_the_table_covers_every_saga_state() -> None:
    assert {state for state, _ in ALLOWED} == set(SagaState)


@pytest.mark.parametrize(("state", "allowed"), ALLOWED)
def test_allowed_actions_per_saga_state(state: SagaState, allowed: set[Action]) -> None:
    assert allowed_actions(state) == allowed
    for action in (Action.RESOLVE, Action.RETRY, Action.CANCEL):
        refusal = saga_refusal(SAGA, state, action)
        if action in allowed:
            assert refusal is None
        else:
            assert refusal is not None and refusal.kind is RefusalKind.CONFLICT
            assert f"is {state.value}" in refusal.message  # the refusal names the state


@pytest.mark.parametrize(
    ("state", "action", "text"),
    [
        (SagaState.COMPLETED, Action.CANCEL, "nothing to cancel"),
        (SagaState.BLOCKED_FENCE, Action.CANCEL, "resolve or retry it first"),
        (SagaState.COMPENSATING, Action.CANCEL, "already under way"),
        (SagaState.RUNNING, Action.RESOLVE, "not blocked_unknown"),
        (SagaState.BLOCKED_UNKNOWN, Action.RETRY, "use `effectusd resolve`"),
        (SagaState.BLOCKED_CONTRACT, Action.RESOLVE, "use `effectusd retry`"),
        (SagaState.FAILED, Action.RETRY, "it is finished"),
    ],
)
def test_refusal_texts(state: SagaState, action: Action, text: str) -> None:
    refusal = saga_refusal(SAGA, state, action)
    assert refusal is not None and text in refusal.message and SAGA in refusal.message


# -- resolve --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ((True, False, False, False, False), Resolution.COMMITTED),
        ((True, False, False, False, True), Resolution.COMMITTED),
        ((False, True, True, False, False), Resolution.RETRY),
        ((False, True, False, True, False), Resolution.FAIL),
        ((False, False, False, False, False), "exactly one of --committed"),
        ((True, True, False, False, False), "exactly one of --committed"),
        ((True, False, True, False, False), "go with --not-committed"),
        ((False, True, False, False, False), "exactly one of --retry or --fail"),
        ((False, True, True, True, False), "exactly one of --retry or --fail"),
        ((False, True, True, False, True), "--result goes with --committed"),
    ],
)
def test_resolution_flags(flags: tuple[bool, ...], expected: Resolution | str) -> None:
    if isinstance(expected, Resolution):
        assert resolution(*flags) is expected
    else:
        with pytest.raises(Refused) as caught:
            resolution(*flags)
        assert caught.value.kind is RefusalKind.INVALID and expected in caught.value.message


@pytest.mark.parametrize("evidence", [None, "", "   \n"])
def test_resolve_needs_evidence(evidence: str | None) -> None:
    with pytest.raises(Refused) as caught:
        required_evidence(evidence)
    assert caught.value.kind is RefusalKind.INVALID
    assert required_evidence("  ledger shows key abc  ") == "ledger shows key abc"
    assert optional_evidence(evidence) is None


@pytest.mark.parametrize(
    ("text", "direction", "expected"),
    [
        (None, F, None),
        ('{"charge_id":"c-1"}', F, {"charge_id": "c-1"}),
        ("[1, 2.5, null]", None, [1, 2.5, None]),
        ("{bad", F, "malformed JSON"),
        ('{"a":1,"a":2}', F, "duplicate object key"),
        ("9007199254740993", F, "outside ±(2^53-1)"),
        ("NaN", F, "not JSON"),
        ("{}", C, "compensations store none"),
    ],
)
def test_committed_result_is_strict_canonical_json(
    text: str | None, direction: Direction | None, expected: Any
) -> None:
    if isinstance(expected, str):
        with pytest.raises(Refused) as caught:
            committed_result(text, direction)
        assert caught.value.kind is RefusalKind.INVALID and expected in caught.value.message
    else:
        assert committed_result(text, direction) == expected


def test_resolve_target_picks_the_blocked_unknown_dispatch() -> None:
    dispatches = [
        dispatch(1, "s1", DispatchState.SUCCEEDED),
        dispatch(2, "s2", DispatchState.FAILED_PERMANENT),
        dispatch(3, "s1", DispatchState.BLOCKED_UNKNOWN, C, uncertain=1),
    ]
    effects = ["s1", "s2"]
    state = SagaState.BLOCKED_UNKNOWN
    assert resolve_target(SAGA, state, "s1", None, dispatches, effects).dispatch_id == 3
    assert resolve_target(SAGA, state, "s1", C, dispatches, effects).dispatch_id == 3
    with pytest.raises(Refused) as caught:
        resolve_target(SAGA, state, "s1", F, dispatches, effects)
    assert caught.value.kind is RefusalKind.CONFLICT
    assert "s1/forward" in caught.value.message and "succeeded" in caught.value.message
    with pytest.raises(Refused) as caught:
        resolve_target(SAGA, state, "nope", None, dispatches, effects)
    assert caught.value.kind is RefusalKind.NOT_FOUND and "'nope'" in caught.value.message
    with pytest.raises(Refused) as caught:
        resolve_target(SAGA, state, "s2", C, dispatches, effects)
    assert caught.value.kind is RefusalKind.NOT_FOUND and "s2/compensation" in caught.value.message


def test_resolve_on_a_saga_that_is_not_blocked_names_both_states() -> None:
    dispatches = [dispatch(1, "s1", DispatchState.SUCCEEDED)]
    with pytest.raises(Refused) as caught:
        resolve_target(SAGA, SagaState.COMPLETED, "s1", None, dispatches, ["s1"])
    assert caught.value.kind is RefusalKind.CONFLICT
    assert "is completed" in caught.value.message and "s1/forward is succeeded" in str(caught.value)


def test_resolve_target_in_a_blocked_compensation_saga_is_its_failed_compensation() -> None:
    dispatches = [
        dispatch(1, "s1", DispatchState.SUCCEEDED),
        dispatch(2, "s2", DispatchState.SUCCEEDED),
        dispatch(3, "s3", DispatchState.FAILED_PERMANENT),
        dispatch(4, "s2", DispatchState.SUCCEEDED, C),
        dispatch(5, "s1", DispatchState.FAILED_PERMANENT, C),
    ]
    effects = ["s1", "s2", "s3"]
    state = SagaState.BLOCKED_COMPENSATION
    assert resolve_target(SAGA, state, "s1", C, dispatches, effects).dispatch_id == 5
    for direction in (None, F):  # settling a compensation is said out loud
        with pytest.raises(Refused) as caught:
            resolve_target(SAGA, state, "s1", direction, dispatches, effects)
        assert caught.value.kind is RefusalKind.CONFLICT
        assert "--direction compensation" in caught.value.message
    with pytest.raises(Refused) as caught:
        resolve_target(SAGA, state, "s2", C, dispatches, effects)
    assert caught.value.kind is RefusalKind.CONFLICT
    assert "s2/compensation" in caught.value.message and "'s1'" in caught.value.message
    with pytest.raises(Refused) as caught:
        resolve_target(SAGA, state, "s3", C, dispatches, effects)
    assert caught.value.kind is RefusalKind.NOT_FOUND


def test_resolve_refuses_a_blocked_compensation_that_could_not_be_dispatched() -> None:
    dispatches = [
        dispatch(1, "s1", DispatchState.SUCCEEDED),
        dispatch(2, "s2", DispatchState.FAILED_PERMANENT),
    ]
    with pytest.raises(Refused) as caught:
        resolve_target(SAGA, SagaState.BLOCKED_COMPENSATION, "s1", F, dispatches, ["s1", "s2"])
    assert caught.value.kind is RefusalKind.CONFLICT
    assert "none of its compensations failed" in caught.value.message


def test_a_failed_compensation_is_settled_committed_or_sent_again_not_failed_again() -> None:
    failed = dispatch(5, "s1", DispatchState.FAILED_PERMANENT, C)
    assert resolution_refusal(SAGA, failed, Resolution.COMMITTED) is None
    assert resolution_refusal(SAGA, failed, Resolution.RETRY) is None
    refusal = resolution_refusal(SAGA, failed, Resolution.FAIL)
    assert refusal is not None and refusal.kind is RefusalKind.CONFLICT
    assert "already failed permanently" in refusal.message
    unknown = dispatch(5, "s1", DispatchState.BLOCKED_UNKNOWN, C, uncertain=1)
    assert resolution_refusal(SAGA, unknown, Resolution.FAIL) is None


@pytest.mark.parametrize("state", list(SagaState))
def test_every_resolution_offered_is_one_resolve_accepts_and_no_other(state: SagaState) -> None:
    """The Resolve form offers ``resolutions``: for every saga and dispatch state, each one
    offered is accepted by resolve's own checks, and every other refused."""
    for dispatch_state in DispatchState:
        for direction in Direction:
            target = dispatch(1, "s1", dispatch_state, direction, uncertain=1)
            offered = resolutions(state, dispatch_state, direction)
            try:
                chosen = resolve_target(SAGA, state, "s1", direction, [target], ["s1"])
            except Refused:
                assert offered == (), (dispatch_state, direction)
                continue
            assert chosen is target and offered, (dispatch_state, direction)
            for decision in Resolution:
                refused = resolution_refusal(SAGA, chosen, decision) is not None
                assert refused == (decision not in offered), (dispatch_state, decision)


def test_a_failed_compensation_is_offered_committed_and_retry_only() -> None:
    assert resolutions(SagaState.BLOCKED_COMPENSATION, DispatchState.FAILED_PERMANENT, C) == (
        Resolution.COMMITTED,
        Resolution.RETRY,
    )
    assert resolutions(SagaState.BLOCKED_UNKNOWN, DispatchState.BLOCKED_UNKNOWN, F) == tuple(
        Resolution
    )


CONTRACT_ACTIONS = [
    # blocked dispatch's verb, drifted verbs, unconfigured verbs -> offered, in order
    ("work", ["work"], [], (Action.ADOPT_CONTRACT,)),  # the change was meant
    ("work", [], [], (Action.RETRY,)),  # the pinned contract is loaded again
    ("work", ["other"], [], (Action.RETRY,)),  # another verb drifted: adopting it fixes nothing
    ("work", [], ["work"], ()),  # its verb is gone from the config: restore it first
    (None, ["other"], [], (Action.ADOPT_CONTRACT,)),  # blocked at enqueue on a drifted verb
    (None, [], [], (Action.RETRY,)),
    (None, [], ["other"], ()),
]


@pytest.mark.parametrize(("verb", "drifted", "unconfigured", "expected"), CONTRACT_ACTIONS)
def test_contract_actions_put_the_one_that_fits_first_and_offer_none_refused(
    verb: str | None, drifted: list[str], unconfigured: list[str], expected: tuple[Action, ...]
) -> None:
    assert contract_actions(verb, drifted, unconfigured) == expected


@pytest.mark.parametrize("state", list(SagaState))
def test_offered_actions_are_actions_the_state_allows(state: SagaState) -> None:
    contract = (Action.ADOPT_CONTRACT, Action.RETRY)
    offered = offered_actions(state, contract)
    if state is SagaState.BLOCKED_CONTRACT:
        assert offered == contract
    else:
        assert set(offered) <= allowed_actions(state) - {Action.RESOLVE, Action.PRUNE}
        assert (Action.RETRY in offered) == (saga_refusal(SAGA, state, Action.RETRY) is None)


# -- retry ----------------------------------------------------------------------------------

RETRY_TARGETS = [
    (SagaState.BLOCKED_FENCE, [dispatch(1, "s1", DispatchState.BLOCKED_FENCE)], 1),
    (
        SagaState.BLOCKED_CONTRACT,
        [
            dispatch(1, "s1", DispatchState.SUCCEEDED),
            dispatch(2, "s2", DispatchState.BLOCKED_CONTRACT),
        ],
        2,
    ),
    (SagaState.BLOCKED_CONTRACT, [dispatch(1, "s1", DispatchState.SUCCEEDED)], None),
    (
        SagaState.BLOCKED_COMPENSATION,
        [
            dispatch(1, "s1", DispatchState.SUCCEEDED),
            dispatch(2, "s2", DispatchState.FAILED_PERMANENT),
            dispatch(3, "s1", DispatchState.FAILED_PERMANENT, C),
        ],
        3,
    ),
    (
        SagaState.BLOCKED_COMPENSATION,
        [
            dispatch(1, "s1", DispatchState.SUCCEEDED),
            dispatch(2, "s2", DispatchState.FAILED_PERMANENT),
        ],
        None,
    ),
]


@pytest.mark.parametrize(("state", "dispatches", "expected"), RETRY_TARGETS)
def test_retry_target(
    state: SagaState, dispatches: list[DispatchFacts], expected: int | None
) -> None:
    target = retry_target(SAGA, state, dispatches)
    assert (target.dispatch_id if target else None) == expected


@pytest.mark.parametrize(
    "state", [SagaState.RUNNING, SagaState.BLOCKED_UNKNOWN, SagaState.COMPLETED]
)
def test_retry_refuses_other_states(state: SagaState) -> None:
    with pytest.raises(Refused) as caught:
        retry_target(SAGA, state, [])
    assert caught.value.kind is RefusalKind.CONFLICT and state.value in caught.value.message


def test_retry_of_blocked_fence_without_a_fenced_dispatch_is_refused() -> None:
    with pytest.raises(Refused, match="changed by hand"):
        retry_target(SAGA, SagaState.BLOCKED_FENCE, [dispatch(1, "s1", DispatchState.SUCCEEDED)])


def test_contract_refusal_names_the_verb() -> None:
    assert contract_refusal("charge", "ab" * 32, "ab" * 32) is None
    drifted = contract_refusal("charge", "ab" * 32, "cd" * 32)
    assert drifted is not None and "'charge'" in drifted.message and "cdcdcdcdcdcd" in str(drifted)
    missing = contract_refusal("charge", "ab" * 32, None)
    assert missing is not None and "not in the loaded config" in missing.message


@pytest.mark.parametrize(
    ("attempt", "verb_max", "expected"), [(0, 1, 1), (1, 5, 6), (3, 3, 6), (7, 1, 8)]
)
def test_fresh_budget_is_the_attempts_made_plus_a_whole_new_budget(
    attempt: int, verb_max: int, expected: int
) -> None:
    assert fresh_budget(attempt, verb_max) == expected
    assert fresh_budget(attempt, verb_max) > attempt  # the next attempt is always allowed


def test_fresh_budget_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        fresh_budget(1, 0)


def test_resumed_state() -> None:
    assert resumed_state(F) is SagaState.RUNNING
    assert resumed_state(C) is SagaState.COMPENSATING


BU, BC, RUN, COMP, DONE = (
    SagaState.BLOCKED_UNKNOWN,
    SagaState.BLOCKED_COMPENSATION,
    SagaState.RUNNING,
    SagaState.COMPENSATING,
    SagaState.COMPENSATED,
)


@pytest.mark.parametrize(
    ("blocked_from", "resumed", "reason", "began", "expected"),
    [
        (BC, COMP, None, "step 's2' failed", "step 's2' failed"),
        (BU, DONE, None, "canceled by u", "canceled by u"),
        (BU, COMP, "step 's1' failed: x", "older", "step 's1' failed: x"),  # a new reason wins
        (BU, RUN, None, "older", None),
        (COMP, DONE, None, "older", None),  # not an operator resume: the engine's rule stands
        (BC, COMP, None, None, None),
    ],
)
def test_resumed_stop_reason(
    blocked_from: SagaState,
    resumed: SagaState,
    reason: str | None,
    began: str | None,
    expected: str | None,
) -> None:
    assert resumed_stop_reason(blocked_from, resumed, reason, began) == expected


# -- cancel ---------------------------------------------------------------------------------

CANCELS = [
    (dispatch(1, "s1", DispatchState.QUEUED, attempt=0), None, CancelEffect.CANCEL_NOW),
    (dispatch(1, "s1", DispatchState.RETRY_WAIT), None, CancelEffect.CANCEL_NOW),
    (dispatch(1, "s1", DispatchState.RETRY_WAIT, uncertain=1), None, CancelEffect.FLAG_ONLY),
    (dispatch(1, "s1", DispatchState.IN_FLIGHT), None, CancelEffect.FLAG_ONLY),
    (None, None, CancelEffect.FLAG_ONLY),
    # asked before, while in flight; now it waits for a retry: cancel it now
    (dispatch(1, "s1", DispatchState.RETRY_WAIT, attempt=2), "user:a", CancelEffect.CANCEL_NOW),
    (dispatch(1, "s1", DispatchState.IN_FLIGHT), "user:a", "already requested by user:a"),
]


@pytest.mark.parametrize(("forward", "requested_by", "expected"), CANCELS)
def test_cancel_effect(
    forward: DispatchFacts | None, requested_by: str | None, expected: CancelEffect | str
) -> None:
    if isinstance(expected, CancelEffect):
        assert cancel_effect(SAGA, SagaState.RUNNING, requested_by, forward) is expected
    else:
        with pytest.raises(Refused) as caught:
            cancel_effect(SAGA, SagaState.RUNNING, requested_by, forward)
        assert caught.value.kind is RefusalKind.CONFLICT and expected in caught.value.message


@pytest.mark.parametrize("state", [s for s in SagaState if s is not SagaState.RUNNING])
def test_cancel_refuses_every_state_but_running(state: SagaState) -> None:
    with pytest.raises(Refused) as caught:
        cancel_effect(SAGA, state, None, None)
    assert state.value in caught.value.message


def test_cancel_reason() -> None:
    assert cancel_reason("user:bob", None) == "canceled by user:bob"
    assert cancel_reason("user:bob", "order withdrawn") == "canceled by user:bob: order withdrawn"


# -- the engine entry points the operator actions reuse -------------------------------------


def saga_facts(
    registry: Registry,
    plan: dict[str, Any],
    states: dict[str, StepState],
    cancel: bool = False,
    saga_state: SagaState = SagaState.RUNNING,
) -> SagaFacts:
    checked = check(plan, registry.verbs)
    return SagaFacts(
        saga_id=SAGA,
        namespace="default",
        execution_id="x",
        state=saga_state,
        cancel_requested=cancel,
        plan=checked,
        facts={"order": "o-1", "amount": 5},
        steps={
            s.id: StepFacts(s.id, s.sequence, states[s.id], {"charge_id": "c-1"})
            for s in checked.steps
        },
    )


def test_cancel_now_with_nothing_to_undo_ends_compensated_with_the_reason(
    core_registry: Registry, checkout_plan: dict[str, Any]
) -> None:
    facts = saga_facts(
        core_registry, checkout_plan, {"charge": StepState.IN_PROGRESS, "ship": StepState.PENDING}
    )
    transition = cancel_now(
        facts, dispatch(1, "charge", DispatchState.QUEUED, attempt=0), core_registry, "why", "u"
    )
    assert transition.dispatch_state is DispatchState.CANCELED
    moves = [(e.effect_id, e.to_state) for e in transition.events if e.kind == "step_state"]
    assert moves == [("charge", StepState.PENDING)]
    assert transition.saga is not None and transition.saga.state is SagaState.COMPENSATED
    assert transition.saga.stop_reason == "why"
    assert transition.new_dispatches == [] and transition.last_outcome is None


def test_cancel_now_compensates_the_succeeded_steps(
    core_registry: Registry, checkout_plan: dict[str, Any]
) -> None:
    facts = saga_facts(
        core_registry, checkout_plan, {"charge": StepState.SUCCEEDED, "ship": StepState.IN_PROGRESS}
    )
    transition = cancel_now(
        facts, dispatch(2, "ship", DispatchState.RETRY_WAIT), core_registry, "why", "u"
    )
    assert transition.saga is not None and transition.saga.state is SagaState.COMPENSATING
    [spec] = transition.new_dispatches
    assert (spec.effect_id, spec.direction) == ("charge", "compensation")
    assert all(event.actor == "u" for event in transition.events)


def test_resume_enqueue_builds_the_next_forward_step(
    core_registry: Registry, checkout_plan: dict[str, Any]
) -> None:
    # resume_enqueue resumes a saga that blocked before it could enqueue (here: drift)
    facts = saga_facts(
        core_registry,
        checkout_plan,
        {"charge": StepState.SUCCEEDED, "ship": StepState.PENDING},
        saga_state=SagaState.BLOCKED_CONTRACT,
    )
    transition = resume_enqueue(facts, core_registry, "u")
    [spec] = transition.new_dispatches
    assert (spec.effect_id, spec.direction) == ("ship", "forward")
    assert transition.saga is not None and transition.saga.state is SagaState.RUNNING


def test_resume_enqueue_builds_the_compensation_when_the_saga_was_compensating(
    core_registry: Registry, checkout_plan: dict[str, Any]
) -> None:
    facts = saga_facts(
        core_registry,
        checkout_plan,
        {"charge": StepState.SUCCEEDED, "ship": StepState.FAILED},
        saga_state=SagaState.BLOCKED_CONTRACT,
    )
    transition = resume_enqueue(facts, core_registry, "u")
    [spec] = transition.new_dispatches
    assert (spec.effect_id, spec.direction) == ("charge", "compensation")
    assert transition.saga is not None and transition.saga.state is SagaState.COMPENSATING


def test_resume_enqueue_blocks_again_while_the_contract_is_drifted(
    core_registry: Registry, checkout_plan: dict[str, Any]
) -> None:
    facts = saga_facts(
        core_registry, checkout_plan, {"charge": StepState.SUCCEEDED, "ship": StepState.PENDING}
    )
    drifted_ship = core_registry.verbs["ship"].model_copy(update={"version": 2})
    drifted = Registry({**core_registry.verbs, "ship": drifted_ship})
    transition = resume_enqueue(facts, drifted, "u")
    assert transition.new_dispatches == []
    assert transition.saga is not None and transition.saga.state is SagaState.BLOCKED_CONTRACT
    assert "'ship'" in (transition.saga.stop_reason or "")


# -- blocked_destination: retry after the fix, or cancel what committed nothing ---------------


def test_retry_of_blocked_destination_sends_the_refused_dispatch_again() -> None:
    dispatches = [
        dispatch(1, "s1", DispatchState.SUCCEEDED),
        dispatch(2, "s2", DispatchState.BLOCKED_DESTINATION, attempt=5),
    ]
    target = retry_target(SAGA, SagaState.BLOCKED_DESTINATION, dispatches)
    assert target is not None and target.dispatch_id == 2
    with pytest.raises(Refused, match="blocked_destination but none of its dispatches is"):
        retry_target(SAGA, SagaState.BLOCKED_DESTINATION, dispatches[:1])


def test_cancel_of_blocked_destination_cancels_the_refused_forward_dispatch_now() -> None:
    refused = dispatch(2, "s2", DispatchState.BLOCKED_DESTINATION, attempt=5)
    assert (
        cancel_effect(SAGA, SagaState.BLOCKED_DESTINATION, None, refused) is CancelEffect.CANCEL_NOW
    )


def test_cancel_of_a_saga_blocked_destination_on_a_compensation_is_refused() -> None:
    with pytest.raises(Refused) as caught:
        cancel_effect(SAGA, SagaState.BLOCKED_DESTINATION, None, None)
    assert caught.value.kind is RefusalKind.CONFLICT
    assert "on a compensation" in caught.value.message and "retry" in caught.value.message


@pytest.mark.parametrize(
    ("state", "requested", "blocking", "offered"),
    [
        (SagaState.RUNNING, False, [], True),
        (SagaState.RUNNING, True, [], False),
        (SagaState.BLOCKED_DESTINATION, False, [F], True),
        (SagaState.BLOCKED_DESTINATION, True, [F], True),
        (SagaState.BLOCKED_DESTINATION, False, [C], False),
        (SagaState.BLOCKED_FENCE, False, [F], False),
        (SagaState.COMPENSATING, False, [], False),
    ],
)
def test_cancel_is_offered_where_cancel_can_act(
    state: SagaState, requested: bool, blocking: list[Direction], offered: bool
) -> None:
    assert cancel_offered(state, requested, blocking) is offered


def test_cancel_now_of_a_blocked_destination_dispatch_compensates_the_succeeded_steps(
    core_registry: Registry, checkout_plan: dict[str, Any]
) -> None:
    facts = saga_facts(
        core_registry,
        checkout_plan,
        {"charge": StepState.SUCCEEDED, "ship": StepState.IN_PROGRESS},
        cancel=True,
        saga_state=SagaState.BLOCKED_DESTINATION,
    )
    refused = dispatch(2, "ship", DispatchState.BLOCKED_DESTINATION, attempt=5)
    transition = cancel_now(facts, refused, core_registry, "canceled by u", "u")
    assert transition.dispatch_state is DispatchState.CANCELED
    assert transition.saga is not None and transition.saga.state is SagaState.COMPENSATING
    [spec] = transition.new_dispatches
    assert (spec.effect_id, spec.direction) == ("charge", "compensation")

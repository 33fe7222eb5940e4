"""resolve and retry: each one guarded transaction over one saga (see common.lock_saga).

Transitions come from the engine (settle() for a resolution, resume_enqueue() for a dispatch
that was never built); only "send it again" (same row and key, due now, fresh budget) is
decided here. Every saga, step and timeline row is written by the recorder's writer.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from effectusd.backends.operation import Operation
from effectusd.core import contracts
from effectusd.core.branches import sent_again_state
from effectusd.core.canonical import JsonValue
from effectusd.core.engine import resume_enqueue, settle
from effectusd.core.operator_decisions import (
    Action,
    RefusalKind,
    Refused,
    Resolution,
    contract_refusal,
    fresh_budget,
    operator_text,
    resolution_refusal,
    resolve_target,
    retry_target,
)
from effectusd.core.registry import Registry
from effectusd.core.states import Direction, DispatchState
from effectusd.core.transition import (
    Completion,
    DispatchFacts,
    Event,
    SagaUpdate,
    Transition,
)
from effectusd.operator.locked_saga import Locked, lock_saga, resumed_reason, write_transition
from effectusd.operator.report import ActionReport, enqueued, saga_after
from effectusd.store.operations import event

# -- resolve ------------------------------------------------------------------------------


def resolve(
    saga_id: str,
    effect_id: str,
    resolution: Resolution,
    *,
    registry: Registry,
    actor: str,
    evidence: str,
    result: JsonValue = None,
    direction: Direction | None = None,
) -> Operation[ActionReport]:
    """Settle the blocked_unknown dispatch of ``effect_id`` from what the operator found out,
    or (``direction`` compensation) the compensation that blocked a blocked_compensation saga:
    committed means it was undone by hand, and compensation goes on below it."""
    operator_text(actor, evidence)
    locked = yield from lock_saga(saga_id)
    target = resolve_target(
        saga_id,
        locked.state,
        effect_id,
        direction,
        locked.dispatches,
        [step.id for step in locked.saga.plan.steps],
    )
    if (refusal := resolution_refusal(saga_id, target, resolution)) is not None:
        raise refusal
    if resolution is Resolution.RETRY:
        return (
            yield from _send_again(
                locked, target, Action.RESOLVE, resolution, registry, actor, evidence
            )
        )
    completion = _operator_answer(target, resolution, result, actor, evidence)
    # The operator answered the question the uncertain attempt left open.
    settled = replace(target, uncertain_attempt=None)
    transition = settle(completion, settled, locked.saga, registry, random.random())
    yield _dispatch_event(
        saga_id,
        Action.RESOLVE,
        target,
        transition.dispatch_state,
        actor,
        evidence,
        {"decision": resolution.value, "uncertain_attempt": target.uncertain_attempt},
    )
    yield from write_transition(
        saga_id, transition, completion, locked.dispatch_rows[target.dispatch_id]
    )
    return _resolved(locked, target, transition, resolution, actor, evidence)


def _resolved(
    locked: Locked,
    target: DispatchFacts,
    transition: Transition,
    resolution: Resolution,
    actor: str,
    evidence: str,
) -> ActionReport:
    saga_id = locked.saga_id
    return ActionReport(
        action=Action.RESOLVE.value,
        saga_id=saga_id,
        actor=actor,
        evidence=evidence,
        saga_state=saga_after(locked, transition),
        decision=resolution.value,
        effect_id=target.effect_id,
        direction=target.direction.value,
        dispatch_state={"from": target.state.value, "to": transition.dispatch_state.value},
        enqueued=enqueued(transition),
        detail={"reason": transition.saga.stop_reason}
        if transition.saga is not None and transition.saga.stop_reason
        else {},
    )


def _operator_answer(
    target: DispatchFacts,
    resolution: Resolution,
    result: JsonValue,
    actor: str,
    evidence: str,
) -> Completion:
    """What the operator found out, as the completion of the uncertain attempt."""
    committed = resolution is Resolution.COMMITTED
    return Completion.resolved(target, committed, result, actor, evidence)


def _live_budget(target: DispatchFacts, pinned: str, registry: Registry) -> int:
    """The fresh budget of a dispatch sent again, refused unless its pinned contract is the
    loaded one."""
    live = registry.verbs.get(target.verb)
    refusal = contract_refusal(
        target.verb,
        pinned,
        None if live is None else pinned if contracts.pinned(live, pinned) else live.contract_hash,
    )
    if refusal is not None or live is None:
        raise refusal or Refused(RefusalKind.CONFLICT, f"verb {target.verb!r} is not configured")
    return fresh_budget(target.attempt - target.unsent, live.retry.max_attempts)


def _reset_budget(target: DispatchFacts, budget: int) -> Operation[None]:
    """The same row and key, due now, with a fresh budget counted from its last attempt."""
    updated = yield (
        "op_retry_dispatch",
        {
            "dispatch_id": target.dispatch_id,
            "max_attempts": budget,
            # the requests written so far: the budget counts requests, not claims
            "budget_base": target.attempt - target.unsent,
            "expected_state": target.state.value,
        },
    )
    if not updated:  # cannot happen under the row lock; refuse rather than guess
        raise Refused(
            RefusalKind.CONFLICT,
            f"{target.effect_id}/{target.direction.value} changed while it was being retried",
        )


def _send_again(
    locked: Locked,
    target: DispatchFacts,
    action: Action,
    decision: str,
    registry: Registry,
    actor: str,
    evidence: str | None,
) -> Operation[ActionReport]:
    """The same dispatch row (same key), due now, with a fresh budget; the saga runs again
    (with parallel steps: unless another branch is still blocked, see sent_again_state)."""
    row = locked.dispatch_rows[target.dispatch_id]
    budget = _live_budget(target, row["contract_hash"], registry)
    yield from _reset_budget(target, budget)
    saga_to, still_blocked = sent_again_state(locked.saga, target.effect_id, target.direction)
    yield _dispatch_event(
        locked.saga_id,
        action,
        target,
        DispatchState.RETRY_WAIT,
        actor,
        evidence,
        {
            "decision": decision,
            "max_attempts": {"from": target.max_attempts, "to": budget},
            "uncertain_attempt_cleared": target.uncertain_attempt,
        },
    )
    resumed = Transition(
        target.state,
        saga=SagaUpdate(saga_to, resumed_reason(locked, saga_to, still_blocked)),
        events=[
            Event("saga_state", from_state=locked.state.value, to_state=saga_to.value, actor=actor)
        ],
    )
    yield from write_transition(locked.saga_id, resumed, notify=(row["destination"],))
    return ActionReport(
        action=action.value,
        saga_id=locked.saga_id,
        actor=actor,
        evidence=evidence,
        saga_state={"from": locked.state.value, "to": saga_to.value},
        decision=decision,
        effect_id=target.effect_id,
        direction=target.direction.value,
        dispatch_state={"from": target.state.value, "to": DispatchState.RETRY_WAIT.value},
        detail={
            "attempts": f"{target.attempt} made, next is {target.attempt + 1} of {budget}",
            "key": row["idempotency_key"],
        },
    )


def _dispatch_event(
    saga_id: str,
    action: Action,
    target: DispatchFacts,
    to_state: DispatchState,
    actor: str,
    evidence: str | None,
    detail: Mapping[str, Any],
) -> tuple[str, dict[str, Any]]:
    """The timeline row of an operator action on one dispatch: its attempt and state move."""
    return event(
        saga_id,
        f"operator_{action.value}",
        actor,
        effect_id=target.effect_id,
        direction=target.direction.value,
        attempt=target.attempt,
        from_state=target.state.value,
        to_state=to_state.value,
        evidence=evidence,
        detail=detail,
    )


# -- retry --------------------------------------------------------------------------------


def retry(
    saga_id: str, *, registry: Registry, actor: str, evidence: str | None
) -> Operation[ActionReport]:
    """Send the dispatch that blocked the saga again (blocked_fence, blocked_contract,
    blocked_destination, blocked_compensation); build it now when the saga blocked before it
    existed."""
    operator_text(actor, evidence)
    locked = yield from lock_saga(saga_id)
    target = retry_target(saga_id, locked.state, locked.dispatches)
    if target is not None:
        return (
            yield from _send_again(
                locked, target, Action.RETRY, "send_again", registry, actor, evidence
            )
        )
    return (yield from _enqueue_now(locked, Action.RETRY, registry, actor, evidence))


def _enqueue_now(
    locked: Locked, action: Action, registry: Registry, actor: str, evidence: str | None
) -> Operation[ActionReport]:
    """Build the dispatch the saga blocked before creating, as the engine would have."""
    saga_id = locked.saga_id
    transition = resume_enqueue(locked.saga, registry, actor)
    if transition.saga is not None and transition.saga.state.is_blocked:
        raise Refused(
            RefusalKind.CONFLICT,
            f"saga {saga_id} would stay {transition.saga.state.value}: "
            f"{transition.saga.stop_reason}",
        )
    built = transition.new_dispatches[0] if transition.new_dispatches else None
    yield event(
        saga_id,
        f"operator_{action.value}",
        actor,
        effect_id=built.effect_id if built else None,
        direction=built.direction if built else None,
        to_state=DispatchState.QUEUED.value if built else None,
        evidence=evidence,
        detail={"decision": "enqueue", "was_blocked_because": locked.row["stop_reason"]},
    )
    yield from write_transition(saga_id, transition)
    return ActionReport(
        action=action.value,
        saga_id=saga_id,
        actor=actor,
        evidence=evidence,
        saga_state=saga_after(locked, transition),
        decision="enqueue",
        effect_id=built.effect_id if built else None,
        direction=built.direction if built else None,
        dispatch_state={"from": "none", "to": DispatchState.QUEUED.value} if built else None,
        enqueued=enqueued(transition),
    )

"""cancel: record the request; cancel the forward dispatch and compensate now when it cannot
have taken effect, else leave it to the engine when the dispatch's outcome arrives."""

from __future__ import annotations

from dataclasses import replace

from effectusd.backends.operation import Operation
from effectusd.core.engine import cancel_now
from effectusd.core.operator_decisions import (
    CANCELABLE_NOW_STATES,
    Action,
    CancelEffect,
    RefusalKind,
    Refused,
    cancel_effect,
    cancel_reason,
    operator_text,
)
from effectusd.core.registry import Registry
from effectusd.core.states import Direction, DispatchState
from effectusd.core.transition import DispatchFacts
from effectusd.operator.locked_saga import lock_saga, write_transition
from effectusd.operator.report import ActionReport, enqueued, saga_after
from effectusd.store.operations import event


def _live_forward(dispatches: list[DispatchFacts]) -> DispatchFacts | None:
    """The forward dispatch a cancel acts on. With parallel steps several may be live: one not
    sent yet is canceled now (the engine cancels the other unsent ones and waits for the rest)."""
    live = [
        d
        for d in dispatches
        if d.direction is Direction.FORWARD
        and (d.state in CANCELABLE_NOW_STATES or d.state is DispatchState.IN_FLIGHT)
    ]
    return max(live, key=lambda d: (_not_sent(d), d.dispatch_id)) if live else None


def cancel(
    saga_id: str, *, registry: Registry, actor: str, evidence: str | None
) -> Operation[ActionReport]:
    """Record the cancel request; cancel the forward dispatch and compensate now when it
    cannot have taken effect, else leave that to the engine when its outcome arrives."""
    operator_text(actor, evidence)
    locked = yield from lock_saga(saga_id)
    forward = _live_forward(locked.dispatches)
    effect = cancel_effect(saga_id, locked.state, locked.row["cancel_requested_by"], forward)
    if locked.row["cancel_requested_at"] is None:
        yield ("op_request_cancel", {"saga_id": saga_id, "actor": actor})
    reason = cancel_reason(actor, evidence)
    report = ActionReport(
        action=Action.CANCEL.value,
        saga_id=saga_id,
        actor=actor,
        evidence=evidence,
        saga_state={"from": locked.state.value, "to": locked.state.value},
        decision=effect.value,
        effect_id=forward.effect_id if forward else None,
        direction=forward.direction.value if forward else None,
    )
    if effect is CancelEffect.FLAG_ONLY:
        yield from _flag_only(report, forward, evidence)
        return report
    assert forward is not None  # cancel_effect only cancels now a live forward dispatch
    canceled = yield ("op_cancel_dispatch", {"dispatch_id": forward.dispatch_id})
    if not canceled:
        raise Refused(RefusalKind.CONFLICT, f"{forward.effect_id} changed while being canceled")
    facts = replace(locked.saga, cancel_requested=True)
    transition = cancel_now(facts, forward, registry, reason, actor)
    yield event(
        saga_id,
        "operator_cancel",
        actor,
        effect_id=forward.effect_id,
        direction=forward.direction.value,
        attempt=forward.attempt or None,
        from_state=forward.state.value,
        to_state=DispatchState.CANCELED.value,
        evidence=evidence,
        detail={
            "decision": effect.value,
            "never_claimed": forward.attempt == 0,
            "idempotency_key": locked.dispatch_rows[forward.dispatch_id]["idempotency_key"],
        },
    )
    yield from write_transition(saga_id, transition)
    report.saga_state = saga_after(locked, transition)
    report.dispatch_state = {"from": forward.state.value, "to": DispatchState.CANCELED.value}
    report.enqueued = enqueued(transition)
    if transition.saga is not None and transition.saga.stop_reason:
        report.detail["reason"] = transition.saga.stop_reason
    return report


def _not_sent(dispatch: DispatchFacts) -> bool:
    return dispatch.state in CANCELABLE_NOW_STATES and dispatch.uncertain_attempt is None


def _flag_only(
    report: ActionReport, forward: DispatchFacts | None, evidence: str | None
) -> Operation[None]:
    """The dispatch may be at its destination: only the request is recorded; the engine
    starts compensation when its outcome arrives."""
    yield event(
        report.saga_id,
        "operator_cancel",
        report.actor,
        effect_id=report.effect_id,
        direction=report.direction,
        evidence=evidence,
        detail={
            "decision": CancelEffect.FLAG_ONLY.value,
            "dispatch_state": forward.state.value if forward else None,
        },
    )
    report.detail["note"] = (
        "the dispatch may reach its destination; compensation starts when its outcome is recorded"
    )

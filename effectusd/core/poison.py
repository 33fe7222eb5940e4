"""Poison completions: an outcome the store could not record is held for an operator.

When recording one completion fails deterministically (an answer the store cannot hold, a
row it cannot decode, a write a table constraint refuses), the recorder isolates it and
settles it with this transition instead: only its own dispatch and saga stop, in
``blocked_unknown``, with what went wrong as evidence. The transition is built from the
dispatch row and the saga's state alone, so a saga row that cannot even be decoded can
still be stopped.
"""

from __future__ import annotations

from dataclasses import dataclass

from effectusd.core.canonical import printable
from effectusd.core.engine import Completion, Event, SagaUpdate, Transition
from effectusd.core.states import Direction, DispatchState, OutcomeClass, SagaState, SettledBy
from effectusd.core.transition import Quarantined, Settled, settled_event

# Evidence kept about the failure: enough to find it, bounded so it is always storable.
MAX_ERROR_CHARS = 300


@dataclass(frozen=True)
class PoisonedDispatch:
    """What the quarantine knows: the locked dispatch row and its saga's state."""

    effect_id: str
    direction: Direction
    state: DispatchState
    attempt: int
    uncertain_attempt: int | None
    saga_state: SagaState


def held_completion(completion: Completion, failure: str) -> Completion:
    """The completion as it can be stored (the one constructor of a quarantine's): no result,
    the original class kept as evidence, who reported it kept as ``settled_by``."""
    settled_by = completion.cause.settled_by
    may_have_been_sent = settled_by is not SettledBy.GUARD
    return Completion(
        dispatch_id=completion.dispatch_id,
        attempt=completion.attempt,
        lease_token=completion.lease_token,
        outcome=OutcomeClass.UNKNOWN if may_have_been_sent else OutcomeClass.RETRYABLE,
        cause=Quarantined(settled_by),
        status_code=completion.status_code,
        error=f"the outcome could not be recorded: {printable(failure, MAX_ERROR_CHARS)}",
        evidence={
            "unrecorded_outcome": completion.outcome.value,
            "record_failure": printable(failure, MAX_ERROR_CHARS),
        },
        fencing_status=completion.fencing_status,
        actor=completion.actor,
    )


def quarantine(held: Completion, dispatch: PoisonedDispatch) -> Transition:
    """Block ``held``'s dispatch and saga in ``blocked_unknown`` (an operator resolves it
    with ``effectusd resolve``); nothing else of the saga is decided or written."""
    uncertain = dispatch.uncertain_attempt
    if held.outcome is OutcomeClass.UNKNOWN:
        uncertain = held.attempt if uncertain is None else min(uncertain, held.attempt)
    reason = (
        f"{dispatch.effect_id} ({dispatch.direction.value}): attempt {held.attempt}'s outcome "
        "could not be recorded; see the attempt's evidence"
    )
    blocked = DispatchState.BLOCKED_UNKNOWN
    # A settlement out of in_flight is carried by the attempt row it settles (held carries
    # no operator evidence: held_completion); another one is a stored event.
    events: list[Event] = []
    settled = None
    if dispatch.state is DispatchState.IN_FLIGHT:
        settled = Settled(blocked, held.actor)
    else:
        events.append(
            settled_event(
                held,
                dispatch.effect_id,
                dispatch.direction.value,
                dispatch.state.value,
                blocked.value,
            )
        )
    saga = None
    if dispatch.saga_state is not SagaState.BLOCKED_UNKNOWN:
        saga = SagaUpdate(SagaState.BLOCKED_UNKNOWN, reason)
        events.append(
            Event(
                "saga_state",
                from_state=dispatch.saga_state.value,
                to_state=SagaState.BLOCKED_UNKNOWN.value,
                actor=held.actor,
                detail={"reason": reason},
            )
        )
    return Transition(
        dispatch_state=blocked,
        uncertain_attempt=uncertain,
        last_outcome=held.outcome,
        last_error=held.error,
        saga=saga,
        events=events,
        settled=settled,
    )

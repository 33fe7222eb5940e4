"""The facts the engine decides from and the Transition it returns.

Plain records: the store reads the facts under lock and writes the Transition back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from types import MappingProxyType
from typing import Any, ClassVar, Protocol

from effectusd.core.answers import PresetClass
from effectusd.core.canonical import JsonValue
from effectusd.core.enqueue import DispatchSpec
from effectusd.core.frozen import frozen
from effectusd.core.plan import CheckedPlan
from effectusd.core.states import (
    Cause,
    Delivery,
    Direction,
    DispatchState,
    FencingStatus,
    OutcomeClass,
    SagaState,
    SettledBy,
    StepState,
)

ENGINE = "engine"
# An attempt's evidence says whether its request may have been written ("sent"): this value
# means it ended before the write, so nothing reached the destination.
NOT_SENT = "not_sent"
MAYBE_SENT = "maybe_sent"
NOT_SENT_EVIDENCE: Mapping[str, Any] = MappingProxyType({"sent": NOT_SENT})


@frozen
class StepFacts:
    effect_id: str
    sequence: int
    state: StepState
    result: JsonValue = None
    # Read for plans with parallel steps only (docs/design.md section 4, "Parallel steps"):
    # the state of the step's forward dispatch while the step is in progress, whether an
    # attempt of it may have committed, and the step's place in the order steps succeeded.
    dispatch: DispatchState | None = None
    uncertain: bool = False
    succeeded_order: int | None = None


@frozen
class SagaFacts:
    saga_id: str
    namespace: str
    execution_id: str
    state: SagaState
    cancel_requested: bool
    plan: CheckedPlan
    facts: Mapping[str, JsonValue]
    steps: Mapping[str, StepFacts]
    # Why compensation began (the reason on the latest move into compensating), loaded with
    # the saga row while it is blocked: a blocked saga that resumes compensating gets it back.
    compensation_reason: str | None = None


@frozen
class DispatchFacts:
    dispatch_id: int
    effect_id: str
    direction: Direction
    delivery: Delivery
    verb: str
    state: DispatchState
    attempt: int
    max_attempts: int  # as stored; the budget in force is registry.retry_budget()
    uncertain_attempt: int | None
    # Attempts whose write-ahead found a fencing resource held by another live dispatch:
    # nothing was sent, so they are not attempts of the retry budget.
    fence_waits: int = 0
    budget_base: int | None = 0
    # Claims that ended before their request was written (fence waits included), this one's
    # not yet: attempt - unsent requests may have been written, what retry.max_attempts bounds.
    unsent: int = 0
    # How long the time budget of calls never sent or known not committed has run (database
    # clock, from the dispatch's first claim or an operator's retry); None: not started.
    budget_elapsed: timedelta | None = None


@frozen
class FenceWait:
    """The cause of an attempt whose write-ahead found a fencing resource held by another
    live dispatch; nothing was sent. ``waited`` runs from the first busy write-ahead of this
    wait (database clock); ``holder`` names the holding dispatch, its saga and lease owner,
    never a resource value."""

    settled_by: ClassVar[SettledBy] = SettledBy.GUARD

    waited: timedelta
    holder: str
    resource: str | None = None  # the busy resource, for the timeline only (never an error)
    started: bool = False  # this busy write-ahead started the wait (none was in progress)


@frozen
class Quarantined:
    """The cause of an attempt whose outcome the store could not record: the recorder holds
    it for a person (``effectusd.core.poison``). ``settled_by``: who reported the outcome it
    could not record (the attempt row keeps it)."""

    settled_by: SettledBy


# Why an attempt ended: a closed set, matched by ``engine.settle`` (``cause.settled_by`` says
# who reported it).
AttemptCause = Cause | FenceWait | Quarantined


class HeldAttempt(Protocol):
    """One attempt of a dispatch under a lease (a store's claim, or the executor's invocation
    of it): what a completion of it is matched by when recorded. A probe's invocation names
    the probed attempt under no lease (None): its answer is read, never recorded."""

    @property
    def dispatch_id(self) -> int: ...

    @property
    def attempt(self) -> int: ...

    @property
    def lease_token(self) -> str | None: ...


@frozen
class HeldClaim:
    """A HeldAttempt by value: the claim an invocation carries out, when the request's own
    number (X-Effectus-Attempt) is not the claim's."""

    dispatch_id: int
    attempt: int
    lease_token: str | None = field(repr=False)


@frozen
class Completion:
    """What one attempt ended with, and why (``cause``): made by one named constructor per
    kind, for the executor's answer, a guard, a fence wait, a reclaim, a person's resolution,
    a probe's answer (here) and a quarantine (``effectusd.core.poison``)."""

    dispatch_id: int
    attempt: int
    lease_token: str | None
    outcome: OutcomeClass
    cause: AttemptCause  # what the engine matches on (``engine.settle``)
    status_code: int | None = None
    result: JsonValue = None
    error: str | None = None
    evidence: Mapping[str, Any] = field(default_factory=dict)
    fencing_status: FencingStatus | None = None
    actor: str = ENGINE
    operator_evidence: str | None = None
    # Set when only the destination's ``answers`` preset classified the answer (its status,
    # without X-Effectus-Outcome or a status_map entry): such an answer never settles an
    # earlier uncertain attempt, and a destination_problem one is never compensated.
    preset: PresetClass | None = None

    @property
    def written(self) -> bool:
        """Whether the attempt's request may have been written to the wire: False only where
        its evidence says it ended before the write (the executor's "not sent", a pre-send
        guard, a lease that ran out unsent). Such a claim is no request: it spends no attempt
        of ``retry.max_attempts`` and does not advance X-Effectus-Attempt."""
        return self.evidence.get("sent") != NOT_SENT

    @classmethod
    def answered(
        cls,
        held: HeldAttempt,
        outcome: OutcomeClass,
        *,
        status_code: int | None = None,
        result: JsonValue = None,
        error: str | None = None,
        evidence: Mapping[str, Any] = MappingProxyType({}),
        fencing_acknowledged: bool = False,
        fencing_sent: FencingStatus = FencingStatus.NOT_REQUESTED,
        preset: PresetClass | None = None,
    ) -> Completion:
        """The attempt ``held`` as its executor classified it (a transport failure included):
        the one constructor of every call's completion. Its fencing status is the one it was
        sent with (``fencing_sent``, the write-ahead's) moved on by the answer
        (``_fencing_after_call``)."""
        return cls(
            held.dispatch_id,
            held.attempt,
            held.lease_token,
            outcome,
            Cause.ANSWERED,
            status_code=status_code,
            result=result,
            error=error,
            evidence=evidence,
            fencing_status=_fencing_after_call(fencing_sent, outcome, fencing_acknowledged),
            preset=preset,
        )

    @classmethod
    def not_sent(
        cls, held: HeldAttempt, cause: Cause | FenceWait, reason: str, *, actor: str = ENGINE
    ) -> Completion:
        """A pre-send guard (or a busy fencing resource) stopped the call for ``cause``:
        nothing was sent, so the attempt is known not committed (retryable), and a guard
        settlement never counts as maybe sent."""
        if cause.settled_by is not SettledBy.GUARD:
            raise ValueError(f"{cause!r} is not a pre-send guard's cause")
        return cls(
            held.dispatch_id,
            held.attempt,
            held.lease_token,
            OutcomeClass.RETRYABLE,
            cause,
            error=reason,
            evidence=NOT_SENT_EVIDENCE,
            actor=actor,
        )

    @classmethod
    def reclaimed(cls, held: HeldAttempt, sent: bool, lease_owner: str, actor: str) -> Completion:
        """What a reclaim records for an attempt whose lease ran out (``actor``: the
        reclaiming daemon): written ahead (``sent``) means it may have been sent, so the
        outcome is unknown and the delivery rule decides; else nothing was sent, known not
        committed."""
        when = "after the call may have been sent" if sent else "before anything was sent"
        return cls(
            held.dispatch_id,
            held.attempt,
            held.lease_token,
            OutcomeClass.UNKNOWN if sent else OutcomeClass.RETRYABLE,
            Cause.RECLAIMED_SENT if sent else Cause.RECLAIMED_UNSENT,
            error=f"lease of {lease_owner} expired {when}",
            evidence={"sent": MAYBE_SENT if sent else NOT_SENT},
            actor=actor,
        )

    @classmethod
    def resolved(
        cls, blocked: DispatchFacts, committed: bool, result: JsonValue, actor: str, evidence: str
    ) -> Completion:
        """What a person found out about the uncertain attempt of ``blocked`` (``effectusd
        resolve``): success with ``result``, or known not committed, which fails the step."""
        not_committed = OutcomeClass.PERMANENT
        return cls._found_out(
            blocked, Cause.RESOLVED, committed, not_committed, result, actor, evidence
        )

    @classmethod
    def probed(
        cls, blocked: DispatchFacts, committed: bool, result: JsonValue, actor: str, reason: str
    ) -> Completion:
        """What the destination's probe found out about the uncertain attempt of ``blocked``
        (as ``resolved`` records a person's): success with ``result``, or known not committed
        (retryable: the step is sent again)."""
        not_committed = OutcomeClass.RETRYABLE
        return cls._found_out(
            blocked, Cause.PROBED, committed, not_committed, result, actor, reason
        )

    @classmethod
    def _found_out(
        cls,
        blocked: DispatchFacts,
        cause: Cause,
        committed: bool,
        not_committed: OutcomeClass,
        result: JsonValue,
        actor: str,
        evidence: str,
    ) -> Completion:
        return cls(
            blocked.dispatch_id,
            blocked.attempt,
            None,
            OutcomeClass.SUCCESS if committed else not_committed,
            cause,
            result=result if committed else None,
            error=None if committed else f"known not committed, per {actor}: {evidence}",
            actor=actor,
            operator_evidence=evidence,
        )


@frozen
class Event:
    kind: str
    effect_id: str | None = None
    direction: str | None = None
    attempt: int | None = None
    from_state: str | None = None
    to_state: str | None = None
    actor: str = ENGINE
    evidence: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)


def settled_event(
    completion: Completion, effect_id: str, direction: str, from_state: str, to_state: str
) -> Event:
    """The timeline event of ``completion`` settling its attempt: the dispatch moved from
    ``from_state`` to ``to_state``."""
    return Event(
        "attempt_settled",
        effect_id,
        direction,
        completion.attempt,
        from_state,
        to_state,
        completion.actor,
        completion.operator_evidence,
        {
            "outcome": completion.outcome.value,
            "settled_by": completion.cause.settled_by.value,
            "status_code": completion.status_code,
            "error": completion.error,
        },
    )


def enqueued_event(spec: DispatchSpec, actor: str) -> Event:
    """The timeline event of ``spec``'s dispatch enqueued (queued) by ``actor``."""
    return Event(
        "dispatch_enqueued",
        spec.effect_id,
        spec.direction,
        to_state=DispatchState.QUEUED.value,
        actor=actor,
        detail={"idempotency_key": spec.idempotency_key, "args_hash": spec.args_hash},
    )


@frozen
class StepUpdate:
    """A step state its row keeps: the step has no dispatch that says it (it failed at
    enqueue). Every other step move is read from the dispatch rows the transition writes
    (``effectusd.core.steps.step_state``) and is on the timeline as an event or a row's entry."""

    effect_id: str
    state: StepState


@frozen
class SagaUpdate:
    state: SagaState
    stop_reason: str | None


@frozen
class Success:
    """A forward step's success, on the row of the dispatch that made it (migration 10016):
    its result and its place in the order steps succeeded."""

    result: JsonValue
    order: int


@frozen
class Settled:
    """The settlement the settled attempt row carries as its timeline entry (the dispatch moved
    out of in_flight to ``to`` by ``actor``), with the moves that ride on it: the step move
    the success makes (``step``: the step's state after) and the saga's completion (``saga``).
    Which column carries which entry: ``effectusd.core.timeline.ON_ATTEMPT``."""

    to: DispatchState
    actor: str
    step: StepState | None = None
    saga: SagaState | None = None


@dataclass
class Transition:
    """One move of a saga: the rows it writes. ``events`` are the timeline entries stored as
    events; the entries its rows carry instead are ``settled`` (on the attempt row it
    settles), ``enqueued_by`` (on each new outbox row) and ``started_from`` (on the one new
    outbox row whose step's start, from that state, follows the settlement)."""

    dispatch_state: DispatchState
    retry_delay: timedelta | None = None
    uncertain_attempt: int | None = None
    last_outcome: OutcomeClass | None = None
    last_error: str | None = None
    steps: list[StepUpdate] = field(default_factory=list)  # kept step states only
    saga: SagaUpdate | None = None
    new_dispatches: list[DispatchSpec] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    # Forward dispatches of other steps to cancel (parallel plans): each was not sent
    # (queued, or retry_wait with no uncertain attempt) when the facts were read under lock.
    cancel_dispatches: list[str] = field(default_factory=list)
    # A retry of a call never sent or known not committed: how long its time budget has left
    # (the views show when it gives up); None for every other transition.
    gives_up_in: timedelta | None = None
    success: Success | None = None  # the settled dispatch's, written on its row
    settled: Settled | None = None
    enqueued_by: str | None = None
    started_from: StepState | None = None


def _fencing_after_call(
    sent: FencingStatus, outcome: OutcomeClass, acknowledged: bool
) -> FencingStatus:
    """An attempt's fencing status once its answer is in: a stale-fence answer rejected the
    grants; a destination that said so acknowledged durable ones (advisory ones stay
    local_lock_only); a verb without fencing stays not_requested."""
    if sent is FencingStatus.NOT_REQUESTED:
        return sent
    if outcome is OutcomeClass.STALE_FENCE:
        return FencingStatus.STALE_REJECTED
    if acknowledged and sent is FencingStatus.PROPAGATED:
        return FencingStatus.ACKNOWLEDGED
    return sent

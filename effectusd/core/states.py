"""Every state and class name the engine uses, as enums (their values are the stored strings)."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import TypeVar

S = TypeVar("S", bound=StrEnum)


class State(StrEnum):
    """A StrEnum whose ``value`` is a plain attribute read: the enum module's own ``value``
    looks its descriptor up on every read, about twice the time, and the daemon reads some
    twenty-five values per step (events, row parameters)."""

    @property
    def value(self) -> str:
        return self._value_


class SagaState(State):
    # Plain attributes, set per member below: read on every settlement, never called.
    is_terminal: bool  # completed, compensated or failed: nothing moves it any more
    is_blocked: bool  # each blocked_* member: it waits for a person

    RUNNING = "running"
    COMPLETED = "completed"
    COMPENSATING = "compensating"
    COMPENSATED = "compensated"
    FAILED = "failed"
    BLOCKED_UNKNOWN = "blocked_unknown"
    BLOCKED_FENCE = "blocked_fence"
    BLOCKED_COMPENSATION = "blocked_compensation"
    BLOCKED_CONTRACT = "blocked_contract"
    # the destination refused for a reason of its own or of our configuration (answers =
    # "http": 401, 403, ...), nothing was committed, and its retry budget is spent
    BLOCKED_DESTINATION = "blocked_destination"


TERMINAL_SAGA_STATES = frozenset({SagaState.COMPLETED, SagaState.COMPENSATED, SagaState.FAILED})
# Every state a saga waits in for a person: each blocked_* member, one added later included.
BLOCKED_SAGA_STATES = frozenset(state for state in SagaState if state.startswith("blocked_"))
for _state in SagaState:
    _state.is_terminal = _state in TERMINAL_SAGA_STATES
    _state.is_blocked = _state in BLOCKED_SAGA_STATES


class StepState(State):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    COMPENSATING = "compensating"
    COMPENSATED = "compensated"


class DispatchState(State):
    QUEUED = "queued"
    IN_FLIGHT = "in_flight"
    SUCCEEDED = "succeeded"
    RETRY_WAIT = "retry_wait"
    FAILED_PERMANENT = "failed_permanent"
    BLOCKED_UNKNOWN = "blocked_unknown"
    BLOCKED_FENCE = "blocked_fence"
    BLOCKED_CONTRACT = "blocked_contract"
    BLOCKED_DESTINATION = "blocked_destination"
    CANCELED = "canceled"


class Direction(State):
    FORWARD = "forward"
    COMPENSATION = "compensation"


class Delivery(State):
    AT_MOST_ONCE = "at_most_once"
    AT_LEAST_ONCE = "at_least_once"


class OutcomeClass(State):
    SUCCESS = "success"
    RETRYABLE = "retryable_failure_known_not_committed"
    PERMANENT = "permanent_failure"
    UNKNOWN = "unknown_outcome"
    STALE_FENCE = "stale_fence"


class FencingStatus(State):
    NOT_REQUESTED = "not_requested"
    LOCAL_LOCK_ONLY = "local_lock_only"
    PROPAGATED = "propagated"
    ACKNOWLEDGED = "acknowledged"
    STALE_REJECTED = "stale_rejected"


class FencingGuarantee(State):
    DURABLE_MONOTONIC = "durable_monotonic"
    LOCAL_ADVISORY = "local_advisory"


class SettledBy(State):
    """Who reported an attempt's outcome (the stored ``settled_by``)."""

    EXECUTOR = "executor"  # the call's own answer
    RECLAIM = "reclaim"  # the lease ran out before the holder reported
    GUARD = "guard"  # a pre-send check stopped the call: nothing was sent
    OPERATOR = "operator"  # a person settled it (effectusd resolve)


class Cause(State):
    """Why an attempt ended, as the engine matches on it (never stored: the attempt row keeps
    ``settled_by``, which each cause says, the outcome and the error). Two causes carry a
    payload and are classes of their own (``effectusd.core.transition``): a fence wait (how
    long, who holds) and a quarantine (who reported the outcome it could not record)."""

    settled_by: SettledBy  # who reports an attempt that ends so (set per member below)

    ANSWERED = "answered"  # the executor classified the destination's answer or the transport's
    CONTRACT_DRIFT = "contract_drift"  # the verb's live contract no longer pins the saga's
    BUDGET_SPENT = "budget_spent"  # the loaded retry budget is below the attempts made
    LEASE_TOO_SHORT = "lease_too_short"  # the call could not finish before the lease ends
    WRITE_AHEAD_FAILED = "write_ahead_failed"  # the write-ahead did not commit
    RECLAIMED_UNSENT = "reclaimed_unsent"  # the lease ran out before anything was sent
    RECLAIMED_SENT = "reclaimed_sent"  # the lease ran out after the call may have been sent
    RESOLVED = "resolved"  # a person said what the uncertain attempt did (effectusd resolve)
    PROBED = "probed"  # the destination's probe said what the uncertain attempt did


_SETTLED_BY = {
    Cause.ANSWERED: SettledBy.EXECUTOR,
    Cause.CONTRACT_DRIFT: SettledBy.GUARD,
    Cause.BUDGET_SPENT: SettledBy.GUARD,
    Cause.LEASE_TOO_SHORT: SettledBy.GUARD,
    Cause.WRITE_AHEAD_FAILED: SettledBy.GUARD,
    Cause.RECLAIMED_UNSENT: SettledBy.RECLAIM,
    Cause.RECLAIMED_SENT: SettledBy.RECLAIM,
    Cause.RESOLVED: SettledBy.OPERATOR,
    Cause.PROBED: SettledBy.OPERATOR,  # stored as a person's: a probe answers for one
}
for _cause, _by in _SETTLED_BY.items():
    _cause.settled_by = _by  # a plain attribute: read on every settlement, never called


def by_value(states: type[S]) -> Mapping[str, S]:
    """Each member of ``states`` by its value: ``by_value(StepState)[text]`` is
    ``StepState(text)`` for a stored value, at a tenth of the cost (an enum's call runs its
    metaclass's lookup, 0.7 µs; the daemon converts about fifteen stored states per step)."""
    return {member.value: member for member in states}

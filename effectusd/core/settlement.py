"""An attempt's guard after its call: what its reported outcome does, decided in one place
(docs/design.md section 7; the guard before it, and the claim policy, are
``effectusd.core.pre_send``'s).

The recorder loads the facts under its lock (the dispatch row, the attempt the outcome is
for, the saga) and asks ``settle_completion``; it then writes what the answer says and
nothing else. The rules, in the order they apply:

* the guard: the dispatch is in flight on this very attempt and lease token, and a reclaim
  only takes a lease that has run out;
* a reclaim that read the attempt as not sent, where the locked row says it was written
  ahead after all (the write-ahead committed between the reclaim's read and its lock),
  settles it as may-have-been-sent;
* a reclaim whose holder finished first is dropped (there is nothing to reclaim);
* our own earlier executor commit that went through after all is dropped (no duplicate);
* any other answer that misses the guard is late: kept as evidence on its attempt, and it
  settles the dispatch only when it answers the uncertain attempt that blocked it;
* then the engine decides the transition.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from enum import StrEnum

from effectusd.core.engine import settle
from effectusd.core.frozen import frozen
from effectusd.core.registry import Registry
from effectusd.core.states import Cause, DispatchState, OutcomeClass, SettledBy
from effectusd.core.transition import (
    MAYBE_SENT,
    Completion,
    DispatchFacts,
    SagaFacts,
    Transition,
)


class Verdict(StrEnum):
    DROP = "drop"  # nothing is written
    LATE = "late"  # the answer is kept on its attempt as evidence; nothing else moves
    APPLY = "apply"  # the transition is written (after the late evidence, when ``late``)


@frozen
class LockedDispatch:
    """The dispatch row as locked: the engine's facts plus what the guard compares."""

    facts: DispatchFacts
    lease_token: str | None
    lease_expired: bool


@frozen
class AttemptFacts:
    """The attempt row the outcome is for."""

    settled_by: SettledBy | None  # None while the attempt is open
    later_sent: bool  # a later attempt of the dispatch was written ahead (sent)
    sent: bool = False  # this attempt was written ahead (may have been sent)
    lease_token: str | None = None  # the lease the attempt row was opened under


@frozen
class SettlementFacts:
    dispatch: LockedDispatch
    attempt: AttemptFacts
    # The saga's facts, built only for a completion that settles: building them checks the
    # saga's plan, which a dropped or merely late answer never needs.
    saga: Callable[[], SagaFacts]


@frozen
class Settlement:
    verdict: Verdict
    why: str
    late: bool = False  # record the completion as a late answer on its attempt
    transition: Transition | None = None
    # the completion as applied, when the rules changed it (see ``as_locked``)
    applied: Completion | None = None


LOST_ATTEMPT = (
    "an answer for an attempt whose claim the database lost (a failover to a standby that "
    "missed it): its number now names another attempt, whose uncertainty it cannot settle"
)


def same_attempt(completion: Completion, attempt: AttemptFacts) -> bool:
    """The attempt row is the one the completion's attempt opened: same lease token (a
    completion without one, an operator's, names the row by its number alone)."""
    return (
        completion.lease_token is None
        or attempt.lease_token is None
        or completion.lease_token == attempt.lease_token
    )


def holds_lease(completion: Completion, dispatch: LockedDispatch) -> bool:
    """The completion is for the live attempt: in flight, same attempt, same lease token."""
    return (
        dispatch.facts.state is DispatchState.IN_FLIGHT
        and dispatch.facts.attempt == completion.attempt
        and dispatch.lease_token == completion.lease_token
    )


def late_completion_settles(
    completion: Completion, dispatch: DispatchFacts, later_sent: bool
) -> bool:
    """An answer for the attempt whose uncertainty blocked the dispatch settles it, if no
    later attempt was sent and the answer is known."""
    return (
        dispatch.state is DispatchState.BLOCKED_UNKNOWN
        and dispatch.uncertain_attempt == completion.attempt
        and not later_sent
        and completion.outcome is not OutcomeClass.UNKNOWN
    )


def as_settled_late(dispatch: DispatchFacts, completion: Completion) -> DispatchFacts:
    """The dispatch as settle() should see it when a late answer resolves its uncertainty."""
    return replace(dispatch, attempt=completion.attempt, uncertain_attempt=None)


SENT_AFTER_RECLAIM_READ = (
    "; the write-ahead committed after the reclaim read the attempt: it may have been sent"
)


def as_locked(completion: Completion, attempt: AttemptFacts) -> Completion:
    """A reclaim decides "not sent" from a read taken before its lock; the attempt as locked
    is what counts: written ahead means it may have been sent (unknown), never known not
    committed."""
    if (
        completion.cause.settled_by is SettledBy.RECLAIM
        and completion.outcome is OutcomeClass.RETRYABLE
        and attempt.sent
    ):
        return replace(
            completion,
            outcome=OutcomeClass.UNKNOWN,
            evidence={**completion.evidence, "sent": MAYBE_SENT},
            error=(completion.error or "lease expired") + SENT_AFTER_RECLAIM_READ,
            cause=Cause.RECLAIMED_SENT,
        )
    return completion


def settle_completion(
    completion: Completion,
    facts: SettlementFacts,
    registry: Registry,
    jitter: float,
) -> Settlement:
    """What ``completion`` does to the locked rows ``facts`` describe."""
    dispatch = facts.dispatch.facts
    late = False
    by = completion.cause.settled_by
    # the guard: the live attempt's own answer; a reclaim also needs the lease to have run out
    if not (
        holds_lease(completion, facts.dispatch)
        and (by is not SettledBy.RECLAIM or facts.dispatch.lease_expired)
    ):
        if by is SettledBy.RECLAIM:
            return Settlement(Verdict.DROP, "the holder finished first: nothing to reclaim")
        ours = by is SettledBy.EXECUTOR
        if ours and facts.attempt.settled_by is SettledBy.EXECUTOR:
            return Settlement(Verdict.DROP, "our own earlier commit went through after all")
        if not late_completion_settles(completion, dispatch, facts.attempt.later_sent):
            return Settlement(Verdict.LATE, "a late answer, kept as evidence", late=True)
        if not same_attempt(completion, facts.attempt):
            return Settlement(Verdict.LATE, LOST_ATTEMPT, late=True)
        dispatch, late = as_settled_late(dispatch, completion), True
    applied = as_locked(completion, facts.attempt)
    transition = settle(
        applied,
        dispatch,
        facts.saga(),
        registry,
        jitter,
    )
    why = "a late answer settles the uncertain attempt" if late else "the guard holds"
    return Settlement(
        Verdict.APPLY,
        why,
        late=late,
        transition=transition,
        applied=None if applied is completion else applied,
    )

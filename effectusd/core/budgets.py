"""The two retry budgets of a dispatch (docs/design.md section 6).

``retry.max_attempts`` bounds the requests that may have been written while the outcome is
unknown (``registry.retry_budget``). A call never sent, or answered as known not committed,
spends none of it: it is retried until ``retry.give_up_after`` has passed since the
dispatch's first claim (or an operator's retry), on the database clock. This module decides
the second.
"""

from __future__ import annotations

from datetime import timedelta

from effectusd.core.contracts import RetryPolicy
from effectusd.core.states import OutcomeClass, SettledBy


def not_committed_budget_spent(elapsed: timedelta | None, policy: RetryPolicy | None) -> bool:
    """Whether a dispatch whose latest call was never sent or known not committed has spent
    its time budget: ``elapsed`` since the budget started (None: not started, as for a row
    the claim has not stamped), under ``policy`` as loaded now (None: the verb is no longer
    configured, so there is no policy to retry under)."""
    if policy is None:
        return True
    return elapsed is not None and elapsed >= policy.give_up_after


def answered_not_committed(settled_by: str | None, outcome: str | None) -> bool:
    """The destination's answer, or the transport's "not sent", said known not committed:
    while the dispatch retries such calls it waits for its destination (an outage ridden out,
    shown as such, never as a failure). A guard of the daemon's own is not the destination's.
    Takes the stored values as well as the enums (they compare equal)."""
    return settled_by == SettledBy.EXECUTOR and outcome == OutcomeClass.RETRYABLE

"""Retry delays: exponential with a cap, and jitter supplied by the caller (so it stays pure)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from effectusd.core.contracts import RetryPolicy

# The evidence key under which an executor keeps a valid ``Retry-After`` as seconds from the
# answer (executors.classify); the header itself is kept as evidence too.
RETRY_AFTER_S = "retry_after_s"


def backoff_delay(policy: RetryPolicy, attempt: int, jitter: float) -> timedelta:
    """Delay before attempt ``attempt + 1``; ``jitter`` in [0, 1) spreads the upper half."""
    base = policy.initial_backoff.total_seconds() * policy.multiplier ** max(attempt - 1, 0)
    capped = min(base, policy.max_backoff.total_seconds())
    return timedelta(seconds=capped / 2 + capped / 2 * min(max(jitter, 0.0), 0.999999))


def retry_delay(
    policy: RetryPolicy, attempt: int, jitter: float, evidence: Mapping[str, Any]
) -> timedelta:
    """The delay of a retry the outcome already allows: the destination's ``Retry-After``
    when its answer gave a valid one (never beyond ``policy.max_backoff``), else the backoff.
    Retry-After never decides whether a call is retried, only when."""
    after = evidence.get(RETRY_AFTER_S)
    if isinstance(after, int | float) and not isinstance(after, bool) and after >= 0:
        return min(timedelta(seconds=after), policy.max_backoff)
    return backoff_delay(policy, attempt, jitter)

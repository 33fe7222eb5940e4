"""Retry delays: exponential with a cap, and jitter supplied by the caller (so it stays pure)."""

from __future__ import annotations

from datetime import timedelta

from effectusd.core.contracts import RetryPolicy


def backoff_delay(policy: RetryPolicy, attempt: int, jitter: float) -> timedelta:
    """Delay before attempt ``attempt + 1``; ``jitter`` in [0, 1) spreads the upper half."""
    base = policy.initial_backoff.total_seconds() * policy.multiplier ** max(attempt - 1, 0)
    capped = min(base, policy.max_backoff.total_seconds())
    return timedelta(seconds=capped / 2 + capped / 2 * min(max(jitter, 0.0), 0.999999))

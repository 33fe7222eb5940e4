"""Token buckets by key, for the console's sign-in limits (docs/operations.md section 8):
each key may spend ``burst`` at once and gets one back every ``every`` seconds, so a limit
once reached lifts by itself as time passes; none locks anyone out for good."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _Bucket:
    tokens: float
    at: float  # when ``tokens`` was counted


class Buckets:
    """At most ``max_keys`` buckets are kept: beyond that, the one touched longest ago is
    forgotten (it may have filled up meanwhile; forgetting it gives its key a full bucket)."""

    def __init__(
        self,
        burst: int,
        every: float,
        max_keys: int = 4_096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.burst = burst
        self.every = every
        self.max_keys = max_keys
        self.clock = clock
        self._buckets: dict[str, _Bucket] = {}

    def wait(self, key: str) -> float:
        """Seconds until ``key`` may spend one; 0 when it may now."""
        bucket = self._refilled(key)
        return 0.0 if bucket.tokens >= 1 else (1 - bucket.tokens) * self.every

    def spend(self, key: str) -> float:
        """Spend one of ``key``'s, if it has one: 0; else the seconds until it will."""
        bucket = self._refilled(key)
        if bucket.tokens < 1:
            return (1 - bucket.tokens) * self.every
        bucket.tokens -= 1
        return 0.0

    def _refilled(self, key: str) -> _Bucket:
        now = self.clock()
        bucket = self._buckets.pop(key, None)  # put back last: the newest touched
        if bucket is None:
            bucket = _Bucket(float(self.burst), now)
            if len(self._buckets) >= self.max_keys:
                del self._buckets[next(iter(self._buckets))]
        else:
            bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.at) / self.every)
            bucket.at = now
        self._buckets[key] = bucket
        return bucket

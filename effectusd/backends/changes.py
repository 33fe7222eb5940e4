"""Waiting for a saga to change: what ``Client.wait`` sleeps on between two reads.

PostgreSQL says when a saga's state changed (``LISTEN effectus_saga``, the payload is the saga
id; postgres/session.py); SQLite cannot tell another connection anything, so there the wait is
a plain sleep of the backend's poll interval. Either way the caller re-reads after each wake-up
and decides; a wake-up is only a hint.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class SagaChanges(Protocol):
    def wait(self, saga_id: str, timeout: float) -> None:
        """Return when ``saga_id`` may have changed, or after ``timeout`` seconds."""


class AsyncSagaChanges(Protocol):
    async def wait(self, saga_id: str, timeout: float) -> None:
        """Return when ``saga_id`` may have changed, or after ``timeout`` seconds."""


class Polling:
    """No notifications: sleep ``interval`` (or less, up to the timeout), then look again."""

    def __init__(self, interval: float) -> None:
        self.interval = interval

    def wait(self, saga_id: str, timeout: float) -> None:
        time.sleep(max(0.0, min(timeout, self.interval)))


class AsyncPolling:
    def __init__(self, interval: float) -> None:
        self.interval = interval

    async def wait(self, saga_id: str, timeout: float) -> None:
        await asyncio.sleep(max(0.0, min(timeout, self.interval)))

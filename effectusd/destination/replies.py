"""The answer side of the destination contract: replies, and the failures a mutation may raise.

A reply is fully described by four stored facts (status, body bytes, outcome class, fencing
acknowledgement), so a replay rebuilds exactly the headers the first answer had.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from effectusd.core.canonical import canonical_bytes
from effectusd.core.states import OutcomeClass
from effectusd.core.wire import encode_reply_headers


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes  # JSON
    outcome: OutcomeClass | None = None  # sent as X-Effectus-Outcome; None on 2xx
    fencing_acknowledged: bool = False  # sent as X-Effectus-Fencing: acknowledged
    retry_after: int | None = None  # seconds, only on retryable replies
    replayed: bool = False  # not on the wire: a replay must look exactly like the original
    # Echoed as X-Effectus-Request-ID: the request this answers (a replay's is the new one's),
    # so a client can refuse an answer that was meant for another request on its connection.
    request_id: str | None = None

    @property
    def headers(self) -> dict[str, str]:
        return {
            "Content-Type": "application/json",
            **encode_reply_headers(
                outcome=self.outcome,
                fencing_acknowledged=self.fencing_acknowledged,
                retry_after=self.retry_after,
                request_id=self.request_id,
            ),
        }


def error_reply(
    status: int, outcome: OutcomeClass, message: str, *, acknowledged: bool = False
) -> Reply:
    body = canonical_bytes({"error": message})
    return Reply(status, body, outcome, fencing_acknowledged=acknowledged)


class PermanentFailure(Exception):
    """Raise from a mutation to refuse for good (e.g. a declined card).

    The mutation's own writes are rolled back; the refusal is stored under the key and replayed
    to every retry, like a success. ``body`` (JSON) defaults to ``{"error": message}``.
    """

    def __init__(self, message: str, *, status: int = 422, body: Any = None) -> None:
        if not 400 <= status <= 599:
            raise ValueError("a permanent failure needs a 4xx or 5xx status")
        super().__init__(message)
        self.status = status
        self.body = {"error": message} if body is None else body

    def reply(self, *, acknowledged: bool) -> Reply:
        body = canonical_bytes(self.body)
        return Reply(self.status, body, OutcomeClass.PERMANENT, fencing_acknowledged=acknowledged)


class RetryableFailure(Exception):
    """Raise from a mutation when it cannot act now but might later (e.g. a dependency is down).

    Everything is rolled back, the key included, so the dispatcher's retry runs afresh.
    """

    def __init__(self, message: str, *, retry_after: int | None = None) -> None:
        if retry_after is not None and retry_after < 0:
            raise ValueError("retry_after is a number of seconds, not negative")
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after

    def reply(self, *, acknowledged: bool) -> Reply:
        body = canonical_bytes({"error": self.message})
        return Reply(
            503,
            body,
            OutcomeClass.RETRYABLE,
            fencing_acknowledged=acknowledged,
            retry_after=self.retry_after,
        )

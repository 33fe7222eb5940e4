"""The executor port: one invocation in, the attempt's Completion out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Protocol

from effectusd.core.frozen import frozen
from effectusd.core.states import FencingStatus
from effectusd.core.transition import Completion, HeldAttempt, HeldClaim
from effectusd.core.wire import FencingGrant, RequestIdentity

__all__ = ["Executor", "FencingGrant", "Invocation"]


@frozen
class Invocation(RequestIdentity):
    """Everything an executor needs for one attempt: the identity, which travels in reserved
    headers (request_id is unique per attempt; the deadline is sent as RFC 3339), the request
    to send, and what the attempt's Completion names of the held attempt, which never goes
    on the wire (``Completion.answered``)."""

    method: str
    path: str  # rendered and percent-encoded, starts with "/"
    body: bytes  # exactly the canonical argument bytes
    timeout: float  # seconds for the whole call
    dispatch_id: int
    # the lease the attempt is held under: never in a header, a log or a repr; a probe's
    # invocation holds none (None)
    lease_token: str | None = field(repr=False)
    fencing_sent: FencingStatus  # the write-ahead's; not_requested without grants
    # traceparent (and tracestate) of the attempt's span; None while tracing is off
    trace_headers: Mapping[str, str] | None = None
    # The claim's number, the settlement guard's counter, where it differs from ``attempt``
    # (X-Effectus-Attempt counts requests written: claims that ended before their write are
    # none); None: the same.
    claim_attempt: int | None = None

    @property
    def held(self) -> HeldAttempt:
        """The attempt its completion answers: the claim, by the guard's counter."""
        if self.claim_attempt is None:
            return self
        return HeldClaim(self.dispatch_id, self.claim_attempt, self.lease_token)


class Executor(Protocol):
    async def call(self, invocation: Invocation) -> Completion:
        """The attempt's completion: every failure is one (classified, never raised)."""
        ...

    async def aclose(self) -> None: ...

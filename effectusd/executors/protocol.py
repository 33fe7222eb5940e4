"""The executor port: one invocation in, one classified result out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any, Protocol

from effectusd.core.frozen import frozen
from effectusd.core.states import OutcomeClass
from effectusd.core.wire import FencingGrant, RequestIdentity

__all__ = ["CallResult", "Executor", "FencingGrant", "Invocation"]


@frozen
class Invocation(RequestIdentity):
    """Everything an executor needs for one attempt: the identity, which travels in reserved
    headers (request_id is unique per attempt; the deadline is sent as RFC 3339), and the
    request to send."""

    method: str
    path: str  # rendered and percent-encoded, starts with "/"
    body: bytes  # exactly the canonical argument bytes
    timeout: float  # seconds for the whole call
    # traceparent (and tracestate) of the attempt's span; None while tracing is off
    trace_headers: Mapping[str, str] | None = None


@frozen
class CallResult:
    outcome: OutcomeClass
    status_code: int | None = None
    result: Any = None  # the parsed JSON body on success
    # what went wrong, for humans: our words name classes and reasons, never secrets or argument
    # values; a refusal's own reason follows its status (evidence["reason"], design.md section 5)
    error: str | None = None
    fencing_acknowledged: bool = False
    evidence: dict[str, Any] = field(default_factory=dict)


class Executor(Protocol):
    async def call(self, invocation: Invocation) -> CallResult: ...

    async def aclose(self) -> None: ...

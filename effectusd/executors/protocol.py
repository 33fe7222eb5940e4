"""The executor port: one invocation in, one classified result out."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from effectusd.core.states import Direction, OutcomeClass
from effectusd.core.wire import FencingGrant

__all__ = ["CallResult", "Executor", "FencingGrant", "Invocation"]


@dataclass(frozen=True, slots=True)
class Invocation:
    """Everything an executor needs for one attempt; identity travels in reserved headers."""

    request_id: str  # unique per attempt
    execution_id: str
    saga_id: str
    effect_id: str
    attempt: int
    direction: Direction
    verb: str
    method: str
    path: str  # rendered and percent-encoded, starts with "/"
    body: bytes  # exactly the canonical argument bytes
    argument_hash: str
    contract_hash: str
    idempotency_key: str
    fencing_grants: tuple[FencingGrant, ...]  # sorted by resource
    deadline: datetime  # timezone-aware UTC; sent as RFC 3339
    timeout: float  # seconds for the whole call


@dataclass(frozen=True, slots=True)
class CallResult:
    outcome: OutcomeClass
    status_code: int | None = None
    result: Any = None  # the parsed JSON body on success
    error: str | None = None  # what went wrong, for humans; never secrets or argument values
    fencing_acknowledged: bool = False
    evidence: dict[str, Any] = field(default_factory=dict)


class Executor(Protocol):
    async def call(self, invocation: Invocation) -> CallResult: ...

    async def aclose(self) -> None: ...

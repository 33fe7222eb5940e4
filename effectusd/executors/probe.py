"""A reconciliation probe on the wire (docs/design.md section 7, Probes): a GET of the verb's
probe path, sent by the destination's own executor, so it has the destination's timeouts, TLS,
headers and credentials, follows no redirect, and its answer is read with the same size and
storability limits as a call's. It sends no body and is no attempt: it carries the key's
identity (Idempotency-Key, the dispatch's attempt and hashes) under a request ID of its own.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from effectusd.core.canonical import JsonValue, canonical_text, printable
from effectusd.core.probes import EVIDENCE_BODY_CHARS, ProbeAnswer
from effectusd.core.states import Direction, OutcomeClass
from effectusd.executors.protocol import CallResult, Executor, Invocation


@dataclass(frozen=True)
class ProbeCall:
    """The key being asked about, as its dispatch row names it."""

    idempotency_key: str
    execution_id: str
    saga_id: str
    effect_id: str
    attempt: int
    direction: Direction
    verb: str
    argument_hash: str
    contract_hash: str
    key_issued_at: datetime
    path: str  # rendered: the probe config's path for this key


@dataclass(frozen=True)
class ProbeReply:
    answer: ProbeAnswer
    evidence: dict[str, Any]  # what is kept on the timeline: bounded, never a credential


async def send_probe(
    executor: Executor, call: ProbeCall, timeout: timedelta, now: datetime
) -> ProbeReply:
    """Ask once; every failure is an answer (a transport error is ``status`` None)."""
    invocation = Invocation(
        idempotency_key=call.idempotency_key,
        request_id=str(uuid.uuid4()),
        execution_id=call.execution_id,
        saga_id=call.saga_id,
        effect_id=call.effect_id,
        attempt=call.attempt,
        direction=call.direction,
        verb=call.verb,
        argument_hash=call.argument_hash,
        contract_hash=call.contract_hash,
        fencing_grants=(),  # a probe holds no resource
        deadline=now + timeout,
        key_issued_at=call.key_issued_at,
        method="GET",
        path=call.path,
        body=b"",
        timeout=timeout.total_seconds(),
    )
    return reply_of(await executor.call(invocation))


def reply_of(result: CallResult) -> ProbeReply:
    """The probe's answer from the executor's classified result."""
    evidence: dict[str, Any] = {
        name: result.evidence[name]
        for name in ("status_code", "headers", "elapsed_ms", "reason", "body", "request_id_echo")
        if name in result.evidence
    }
    status = result.status_code
    if result.evidence.get("request_id_echo") == "mismatched":
        # Not this probe's answer, whatever it says (a stray response on a reused connection).
        return ProbeReply(ProbeAnswer(None, problem=result.error), evidence)
    if status is None:
        return ProbeReply(ProbeAnswer(None, problem=result.error), evidence)
    if 200 <= status < 300:
        if result.outcome is not OutcomeClass.SUCCESS:
            # Oversized, not JSON, not storable, or contradicted by its headers.
            return ProbeReply(ProbeAnswer(status, problem=result.error), evidence)
        evidence["answer"] = bounded(result.result)
        return ProbeReply(ProbeAnswer(status, result.result), evidence)
    return ProbeReply(ProbeAnswer(status), evidence)


def bounded(body: JsonValue) -> str:
    """A committed answer's body as evidence: its canonical JSON, escaped and cut short."""
    return printable(canonical_text(body), EVIDENCE_BODY_CHARS)

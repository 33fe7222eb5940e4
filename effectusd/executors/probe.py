"""A reconciliation probe on the wire (docs/design.md section 7, Probes): a GET of the verb's
probe path, sent by the destination's own executor, so it has the destination's timeouts, TLS,
headers and credentials, follows no redirect, and its answer is read with the same size and
storability limits as a call's. It sends no body and is no attempt: it carries the key's
identity (Idempotency-Key, the dispatch's attempt and hashes) under a request ID of its own.
The executor answers it as it answers a call, with a Completion of the probed attempt (under
no lease, no fencing requested); the probe reads its answer from that and records nothing of
it: what is settled is the ``ProbeAnswer``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Any

from effectusd.core.canonical import JsonValue, canonical_text, printable
from effectusd.core.probes import EVIDENCE_BODY_CHARS, ProbeAnswer
from effectusd.core.states import FencingStatus, OutcomeClass
from effectusd.core.transition import Completion
from effectusd.core.wire import RequestIdentity
from effectusd.executors.protocol import Executor, Invocation


@dataclass(frozen=True)
class ProbeReply:
    answer: ProbeAnswer
    evidence: dict[str, Any]  # what is kept on the timeline: bounded, never a credential


async def send_probe(
    executor: Executor,
    identity: RequestIdentity,
    dispatch_id: int,
    path: str,
    timeout: timedelta,
) -> ProbeReply:
    """Ask once about ``identity``'s key (an attempt of dispatch ``dispatch_id``), at ``path``
    (the probe config's, rendered); every failure is an answer (a transport error is
    ``status`` None)."""
    invocation = Invocation(
        **{field.name: getattr(identity, field.name) for field in fields(RequestIdentity)},
        method="GET",
        path=path,
        body=b"",
        timeout=timeout.total_seconds(),
        dispatch_id=dispatch_id,
        lease_token=None,
        fencing_sent=FencingStatus.NOT_REQUESTED,
    )
    return reply_of(await executor.call(invocation))


def reply_of(result: Completion) -> ProbeReply:
    """The probe's answer from the executor's completion of the probed attempt."""
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

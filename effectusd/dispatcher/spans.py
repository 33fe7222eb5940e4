"""The pipeline's attempt spans (docs/operations.md "Tracing"), made only while tracing is on:
one CLIENT span per attempt, from the claim to the record of its outcome, with an event at
each stage (claim, write-ahead, call, record). While tracing is off the pipeline holds
``NO_SPANS``, whose every stage does nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence

from effectusd.core.engine import Completion
from effectusd.core.states import OutcomeClass
from effectusd.executors.classify import without_reason
from effectusd.store.dispatch import DispatchStore, RecordReport
from effectusd.store.records import Claim, WriteAhead
from effectusd.tracing import AttemptTracer, Span

log = logging.getLogger("effectusd.dispatcher")

Key = tuple[int, int]  # (dispatch_id, attempt)


def _key(item: Claim | Completion) -> Key:
    return item.dispatch_id, item.attempt


def span_name(verb: str) -> str:
    return f"effectusd.dispatch {verb}"


def claim_attributes(claim: Claim) -> dict[str, str | int]:
    """Ids and classes only: the path and the body may carry argument values."""
    return {
        "effectusd.saga_id": claim.saga_id,
        "effectusd.execution_id": claim.execution_id,
        "effectusd.effect_id": claim.effect_id,
        "effectusd.direction": claim.direction.value,
        "effectusd.attempt": claim.attempt,
        "effectusd.destination": claim.destination,
        "effectusd.verb": claim.verb,
        "effectusd.delivery": claim.delivery.value,
        # an opaque hash of namespace, saga, step and direction: nothing to hide in it
        "effectusd.idempotency_key": claim.idempotency_key,
        "effectusd.request_id": claim.request_id,
        "http.request.method": claim.method,
    }


class NoSpans:
    """The stages of ``AttemptSpans`` with tracing off: nothing is opened, sent or ended."""

    async def claimed(self, claims: Sequence[Claim], claimed_at: float) -> None:
        return None

    def written_ahead(self, ready: Iterable[WriteAhead]) -> None:
        return None

    def abandoned(self, claims: Iterable[Claim], reason: str) -> None:
        return None

    def calling(self, claim: Claim) -> tuple[dict[str, str] | None, object | None]:
        return None, None

    def called(self, claim: Claim, token: object | None, completion: Completion) -> None:
        return None

    def recorded(self, batch: Iterable[Completion], report: RecordReport) -> None:
        return None

    def close(self) -> None:
        return None


NO_SPANS = NoSpans()


class AttemptSpans(NoSpans):
    """Open attempt spans by (dispatch id, attempt), ended when the outcome is recorded (or
    when this pipeline gives the attempt up)."""

    def __init__(self, tracer: AttemptTracer, store: DispatchStore) -> None:
        self.tracer = tracer
        self.store = store
        self.open: dict[Key, Span] = {}

    async def claimed(self, claims: Sequence[Claim], claimed_at: float) -> None:
        """Open a span per claim, parented to its saga's submit (read now: the claim itself
        does not carry the context, so an untraced claim reads nothing more)."""
        try:
            stored = await self.store.trace_contexts(sorted({c.saga_id for c in claims}))
        except Exception as exc:  # noqa: BLE001 - tracing never fails a dispatch
            log.warning("reading trace contexts failed (%s); spans without parents", exc)
            stored = {}
        # Started when the claim was sent (claimed_at is on the monotonic clock).
        start_ns = time.time_ns() - int((time.monotonic() - claimed_at) * 1e9)
        for claim in claims:
            span = self.tracer.start(
                span_name(claim.verb), claim_attributes(claim), stored.get(claim.saga_id), start_ns
            )
            span.event("claim", {"effectusd.lease_seconds": int(claim.lease_seconds)})
            self.open[_key(claim)] = span

    def written_ahead(self, ready: Iterable[WriteAhead]) -> None:
        for ahead in ready:
            span = self.open.get(_key(ahead.claim))
            if span is not None:
                span.event(
                    "write-ahead",
                    {
                        "effectusd.fencing_status": str(ahead.fencing_status),
                        "effectusd.fencing_grants": len(ahead.grants),
                    },
                )

    def abandoned(self, claims: Iterable[Claim], reason: str) -> None:
        """This pipeline will record nothing for these: their leases settle them."""
        for claim in claims:
            span = self.open.pop(_key(claim), None)
            if span is not None:
                span.fail(reason)
                span.end()

    def calling(self, claim: Claim) -> tuple[dict[str, str] | None, object | None]:
        """The trace headers to send for the attempt, and a token while its span is current
        (so that an instrumented HTTP client nests under it)."""
        span = self.open.get(_key(claim))
        if span is None:
            return None, None
        span.event("call")
        return span.headers(), span.attach()

    def called(self, claim: Claim, token: object | None, completion: Completion) -> None:
        if token is not None:
            Span.detach(token)
        span = self.open.get(_key(claim))
        if span is not None and completion.status_code is not None:
            span.set({"http.response.status_code": completion.status_code})

    def recorded(self, batch: Iterable[Completion], report: RecordReport) -> None:
        """End the span of each completion recorded (deferred ones stay open), with the
        outcome class, and the states the record moved to; error unless a success."""
        states = {_key(c): t for c, t, _ in report.transitions}
        deferred = {_key(c) for c in report.deferred}
        for completion in batch:
            key = _key(completion)
            if key in deferred:
                continue
            span = self.open.pop(key, None)
            if span is None:
                continue  # a reclaim of another daemon's attempt, or no span was opened
            span.set({"effectusd.outcome": completion.outcome.value})
            transition = states.get(key)
            attributes: dict[str, str | int | bool] = {"effectusd.applied": transition is not None}
            if transition is not None:
                attributes["effectusd.dispatch_state"] = transition.dispatch_state.value
                if transition.saga is not None:
                    attributes["effectusd.saga_state"] = transition.saga.state.value
            span.event("record", attributes)
            if completion.outcome is not OutcomeClass.SUCCESS:
                # the error names classes and reasons, never values (Completion.error), and
                # not what the destination said (kept as the attempt's evidence only)
                error = without_reason(completion.error, completion.evidence)
                span.fail(f"{completion.outcome.value}: {error or 'no detail'}")
            span.end()

    def close(self) -> None:
        """The daemon stops: end what is still open, unrecorded."""
        for span in self.open.values():
            span.fail("the daemon stopped before the outcome was recorded")
            span.end()
        self.open.clear()

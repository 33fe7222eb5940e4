"""How an HTTP transport turns what it saw on the wire into the attempt's Completion.

A transport only sends and says what it saw. Whether a failed call "may have been sent" is the
transport's ``Wire.provably_not_sent``: a request counts as not sent only on positive evidence
that it never got a connection to write on. A false "not sent" can duplicate a payment; a false
"unknown" only waits for an operator, so every doubt resolves to unknown.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from effectusd.core.answers import (
    DECLARED,
    HTTP,
    OUTCOME_OF,
    Preset,
    PresetClass,
    describe,
    preset_class,
)
from effectusd.core.backoff import RETRY_AFTER_S
from effectusd.core.canonical import JsonValue, parse_json, printable
from effectusd.core.states import OutcomeClass
from effectusd.core.transition import MAYBE_SENT, NOT_SENT, Completion
from effectusd.core.wire import (
    FENCING,
    OUTCOME,
    REPLY_HEADERS,
    REQUEST_ID,
    RETRY_AFTER,
    decode_fencing,
    decode_outcome,
    echo_matches,
    is_retry_after,
    retry_after_seconds,
)
from effectusd.executors.protocol import Invocation
from effectusd.executors.storable import body_digest, unstorable_reasons

ANSWER_HEADERS = (*REPLY_HEADERS, REQUEST_ID)  # every header classification reads
MAX_ERROR_CHARS = 500
# A refusal's reason: its body is read only this far, and what it says is cut to REASON_CHARS.
REASON_BYTES = 4096
REASON_CHARS = 200


class Wire:
    """What one request did on the wire, as far as the transport can prove it."""

    __slots__ = ("body", "deadline", "echo", "headers", "invocation", "reason", "status_code")

    def __init__(self, invocation: Invocation) -> None:
        self.invocation = invocation  # the attempt this request carries out
        self.status_code: int | None = None
        self.headers: dict[str, str] = {}
        self.echo: str | None = None  # how the destination's request-ID echo compared
        self.body: dict[str, Any] | None = None  # size and hash of a body we could not keep
        self.reason: str | None = None  # what a refusal's body says, bounded and printable
        # the event loop's time the whole call must end by (set by the transport); None: no limit
        self.deadline: float | None = None

    def provably_not_sent(self, exc: BaseException) -> bool:
        raise NotImplementedError

    @property
    def connection(self) -> str | None:
        """Either "new" or "reused", or None when the request never got a connection."""
        raise NotImplementedError

    def answered(self, status: int, headers: Mapping[str, str]) -> None:
        self.status_code = status
        # Stored and shown to operators: only values the protocol defines are kept verbatim, so
        # a destination that puts a token (or junk) in these headers does not get it stored.
        found = [name for name in REPLY_HEADERS if name in headers]
        self.headers = {name: _evidence_value(name, headers[name]) for name in found}

    def result(
        self,
        started: float,
        outcome: OutcomeClass,
        error: str | None = None,
        *,
        result: JsonValue = None,
        sent: str = MAYBE_SENT,
        preset: PresetClass | None = None,
    ) -> Completion:
        evidence: dict[str, Any] = {
            "sent": sent,
            "status_code": self.status_code,
            "headers": dict(self.headers),
            "elapsed_ms": round((time.monotonic() - started) * 1000),
            "connection": self.connection,
        }
        if self.echo is not None:
            evidence["request_id_echo"] = self.echo
        retry_after = self.headers.get(RETRY_AFTER)
        if retry_after is not None:  # kept verbatim only when valid (``answered``)
            delay = retry_after_seconds(retry_after, datetime.now(UTC))
            if delay is not None:
                evidence[RETRY_AFTER_S] = delay
        if self.body is not None:
            evidence["body"] = self.body
        if preset is not None:
            evidence["answers"] = {"preset": "http", "class": preset.value}
        if error is not None:
            error = printable(error, MAX_ERROR_CHARS)
            if self.reason is not None:
                evidence["reason"] = self.reason
                error = f"{error}: {self.reason}"
        invocation = self.invocation
        return Completion.answered(
            invocation.held,
            outcome,
            status_code=self.status_code,
            result=result,
            error=error,
            evidence=evidence,
            # an answer naming another request acknowledges nothing of this attempt's
            fencing_acknowledged=self.echo != "mismatched"
            and decode_fencing(self.headers.get(FENCING)),
            fencing_sent=invocation.fencing_sent,
            preset=preset,
        )

    def not_sent(self, started: float, error: str) -> Completion:
        return self.result(started, OutcomeClass.RETRYABLE, error, sent=NOT_SENT)


async def classify(
    wire: Wire,
    started: float,
    headers: Mapping[str, str],
    read_body: Callable[[int], Awaitable[bytes | None]],
    *,
    status_map: Mapping[int, OutcomeClass],
    max_response_bytes: int,
    answers: Preset = DECLARED,
    destination: str = "",
) -> Completion:
    """The outcome of an answer whose status is recorded on ``wire``; reads the body only when
    the headers say success. ``answers``: the destination's preset (``effectusd.core.answers``)
    for a status nothing declared; ``destination``: its name, for the error that says what to
    set."""
    status = wire.status_code
    assert status is not None
    outcome, doubt = _header_outcome(wire, status, headers, status_map)
    found = None
    if outcome is None:  # nothing declared: the destination's preset decides
        found, doubt = _preset_outcome(status, answers, destination)
        outcome = OutcomeClass.UNKNOWN if found is None else OUTCOME_OF[found]
    if outcome is not OutcomeClass.SUCCESS:
        # The headers decided. A refusal's body may say why; one that cannot be read in time
        # only loses that, and an unread body only costs this keep-alive connection.
        if not 200 <= status < 300 and wire.echo != "mismatched":
            wire.reason = await _refusal_reason(wire, headers, read_body)
        return wire.result(started, outcome, doubt or f"HTTP {status}", preset=found)
    limit = max_response_bytes
    body = None if _declared_over(headers, limit) else await read_body(limit)
    if body is None:
        error = f"HTTP {status} with a body over max_response_bytes"
        return wire.result(started, OutcomeClass.UNKNOWN, error)
    return _success_body(wire, started, status, body)


async def _refusal_reason(
    wire: Wire, headers: Mapping[str, str], read_body: Callable[[int], Awaitable[bytes | None]]
) -> str | None:
    """What a refusal's body says, read up to REASON_BYTES and never past the call's deadline
    (a timeout there would make the answer unknown): None when it says nothing we keep."""
    if _declared_over(headers, REASON_BYTES):
        return None
    # A hair before the call's own deadline, so this read's timeout fires first.
    until = None if wire.deadline is None else wire.deadline - 0.01
    try:
        async with asyncio.timeout_at(until):
            body = await read_body(REASON_BYTES)
    except Exception:  # noqa: BLE001 - the status and headers decided; the reason is extra
        return None
    return None if body is None else _reason_of(body)


def _declared_over(headers: Mapping[str, str], limit: int) -> bool:
    """The answer's Content-Length says its body is over ``limit`` bytes."""
    declared = headers.get("Content-Length", "")
    return declared.isdigit() and int(declared) > limit


def _reason_of(body: bytes) -> str | None:
    """The reason a refusal's body gives: the ``error`` string of a JSON object (as the kit's
    PermanentFailure sends), or a short body of plain text; on one line, control characters
    escaped, at most REASON_CHARS characters. None for other JSON, and for text that is empty
    or longer (a proxy's error page says nothing the status does not)."""
    try:
        parsed = parse_json(body)
    except (ValueError, RecursionError):
        try:
            text = " ".join(body.decode("utf-8").split())
        except UnicodeDecodeError:
            return None
        if len(text) > REASON_CHARS:
            return None
    else:
        error = parsed.get("error") if isinstance(parsed, dict) else None
        if not isinstance(error, str):
            return None
        text = error
    text = " ".join(text.split())
    return printable(text, REASON_CHARS) if text else None


def without_reason(error: str | None, evidence: Mapping[str, Any]) -> str | None:
    """``error`` without the destination's reason appended to it (``Wire.result``): what may
    go where operators do not look for a destination's words (logs, traces)."""
    reason = evidence.get("reason")
    if error is not None and isinstance(reason, str) and error.endswith(f": {reason}"):
        return error[: -len(reason) - 2]
    return error


def _header_outcome(
    wire: Wire, status: int, headers: Mapping[str, str], status_map: Mapping[int, OutcomeClass]
) -> tuple[OutcomeClass | None, str | None]:
    """What the status, the request-ID echo, X-Effectus-Outcome and status_map decide, with
    the reason when they leave the outcome unknown. SUCCESS means the body decides; None, that
    nothing declared a non-2xx answer's class."""
    echoed = headers.get(REQUEST_ID)
    if echoed is not None:
        # An answer naming another request is not this one's, whatever it says: e.g. a
        # stray second response left on a kept-alive connection by an earlier exchange.
        matched = echo_matches(echoed, wire.invocation.request_id)
        wire.echo = "matched" if matched else "mismatched"
        if not matched:
            doubt = f"HTTP {status} whose {REQUEST_ID} echo names another request"
            return OutcomeClass.UNKNOWN, doubt
    value = headers.get(OUTCOME)
    named = decode_outcome(value)
    if 200 <= status < 300:
        if value is not None and named is not OutcomeClass.SUCCESS:
            # A 2xx that also names a failure contradicts itself; trust neither half.
            return OutcomeClass.UNKNOWN, f"HTTP {status} contradicted by {OUTCOME}"
        return OutcomeClass.SUCCESS, None
    if named is not None and named is not OutcomeClass.SUCCESS:
        return named, None
    if status in status_map:
        return status_map[status], None
    if value is not None:
        # Declared, but not in a way we can use: the preset must not guess over it (it may
        # have meant stale_fence, which nothing may mask).
        how = "contradicted by" if named is OutcomeClass.SUCCESS else "with an invalid"
        return OutcomeClass.UNKNOWN, f"HTTP {status} {how} {OUTCOME} and no status_map entry"
    return None, None


def _preset_outcome(
    status: int, answers: Preset, destination: str
) -> tuple[PresetClass | None, str]:
    """The preset's class of an undeclared non-2xx ``status`` and the error to show, which
    says what would classify it when the preset does not."""
    found = preset_class(answers, status)
    if found is not None:
        return found, describe(status, found)
    if answers != DECLARED:
        return None, (
            f"HTTP {status} without a valid {OUTCOME} or status_map entry (answers = "
            f'"{answers}" leaves it unknown: it may have committed)'
        )
    if preset_class(HTTP, status) is not None:
        return None, (
            f'HTTP {status} without a valid {OUTCOME}: set answers = "http" on destination '
            f"{destination or '(this one)'}, or a status_map entry"
        )
    return None, f"HTTP {status} without a valid {OUTCOME} or status_map entry"


def _success_body(wire: Wire, started: float, status: int, body: bytes) -> Completion:
    """A success answer's body: its JSON is the step's result, if the store can hold it."""
    if not body:
        return wire.result(started, OutcomeClass.SUCCESS)
    try:
        parsed = parse_json(body)
    except (ValueError, RecursionError):
        wire.body = body_digest(body)
        error = f"HTTP {status} with a body that is not JSON"
        return wire.result(started, OutcomeClass.UNKNOWN, error)
    reasons = unstorable_reasons(parsed)
    if reasons:
        # The destination answered, so this is not "not committed"; but a result that the
        # store cannot hold would fail every completion recorded with it. Keep size and hash.
        wire.body = body_digest(body)
        error = f"HTTP {status} with a JSON body that cannot be stored: {'; '.join(reasons)}"
        return wire.result(started, OutcomeClass.UNKNOWN, error)
    return wire.result(started, OutcomeClass.SUCCESS, result=parsed)


def _evidence_value(name: str, value: str) -> str:
    """The header's value if it is one the protocol defines, else only that it was invalid."""
    stripped = value.strip()
    if name == OUTCOME:
        valid = decode_outcome(stripped) is not None
    elif name == FENCING:
        stripped = stripped.lower()
        valid = decode_fencing(stripped)
    else:
        valid = is_retry_after(stripped)
    return stripped if valid else f"(invalid, {len(value)} characters)"

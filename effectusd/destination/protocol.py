"""The request side of the destination contract: read and verify effectusd's reserved headers.

Every check here guards the ledger: a request whose identity headers cannot be trusted must
not create, replay or conflict with a ledger row. Errors name the header and the rule it broke,
never the value, because values (fencing resources, the body) can carry argument data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from effectusd.core import wire
from effectusd.core.canonical import parse_json, sha256_hex
from effectusd.core.states import OutcomeClass
from effectusd.core.wire import (
    ARGUMENT_HASH,
    FencingGrant,
    HeaderSource,
    RequestIdentity,
    WireError,
    WireProblem,
)
from effectusd.destination.replies import Reply, error_reply

__all__ = [
    "BODY",
    "EffectusRequest",
    "FencingGrant",
    "HeaderSource",
    "ProtocolError",
    "parse_request",
    "request_id_of",
]

BODY = "body"  # the name errors about the request body use in place of a header


class ProtocolError(ValueError):
    """A request that breaks the wire protocol: answered 400, permanent_failure, not stored."""

    def __init__(self, header: str, reason: str) -> None:
        self.header = header
        self.reason = reason
        super().__init__(f"{header}: {reason}")

    @classmethod
    def of(cls, problem: WireProblem | WireError) -> ProtocolError:
        return cls(problem.header, problem.reason)

    def reply(self) -> Reply:
        return error_reply(400, OutcomeClass.PERMANENT, str(self))


@dataclass(frozen=True, slots=True)
class EffectusRequest(RequestIdentity):
    """One verified attempt. ``arguments`` is the parsed body; ``body`` the exact bytes.

    The deadline is advisory (see ledger.handle). ``trace_headers``: the W3C trace context
    the daemon sent (``traceparent``, ``tracestate``; empty while its tracing is off), for
    ``effectusd.tracing.server_span``."""

    body: bytes
    arguments: Any
    trace_headers: Mapping[str, str] = field(default_factory=dict)


def parse_request(headers: HeaderSource, body: bytes) -> EffectusRequest:
    """Verify the reserved headers and the body against X-Effectus-Argument-Hash.

    ``headers`` is a mapping or a sequence of (name, value) pairs; names are matched without
    regard to case and byte values are decoded as UTF-8 (the executor sends UTF-8, e.g. for a
    fencing resource like ``account:müller``). Pass raw bytes when your framework decodes
    header bytes as latin-1, as ASGI frameworks do.
    """
    if not isinstance(headers, Mapping):
        headers = list(headers)  # read twice: the identity, then the trace context
    identity = wire.decode_request_headers(headers)
    if isinstance(identity, list):
        raise ProtocolError.of(identity[0])
    if sha256_hex(body) != identity.argument_hash:
        raise ProtocolError(ARGUMENT_HASH, "does not match the SHA-256 of the body")
    try:
        arguments = parse_json(body)
    except (ValueError, RecursionError):
        # ValueError covers invalid UTF-8 too (UnicodeDecodeError is one).
        raise ProtocolError(BODY, "is not JSON") from None
    known = {field.name: getattr(identity, field.name) for field in fields(identity)}
    trace = wire.read_trace_headers(headers)
    return EffectusRequest(**known, body=body, arguments=arguments, trace_headers=trace)


def request_id_of(headers: HeaderSource) -> str | None:
    """The request's ``X-Effectus-Request-ID`` if it has a usable one, for echoing in an
    answer to a request that is refused before (or without) being parsed whole."""
    value = wire.read_header(wire.collect_headers(headers), wire.REQUEST_ID)
    return value if isinstance(value, str) else None

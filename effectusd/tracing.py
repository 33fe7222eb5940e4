"""OpenTelemetry tracing (docs/operations.md "Tracing"): the one module that imports
opentelemetry (import-linter holds the rest of the package to that).

Without the ``otel`` extra everything here is a no-op: ``capture`` gives None,
``AttemptTracer.configured`` gives None (the daemon then does nothing more per step than see
that), ``server_span`` yields None. With it, effectusd never configures a tracer provider
itself: it uses the one the application (or ``opentelemetry-instrument``) set, or the one a
caller passes in; until one is set, the daemon's tracing stays off.

Only the W3C trace context travels (``traceparent`` and ``tracestate``, whatever the
configured global propagator is): baggage is application data, and would be stored with
the saga and sent to every destination.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from effectusd.core.wire import TRACE_HEADERS

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace as otel_trace
    from opentelemetry.context import Context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the extra is not installed: tracing stays off
    otel_trace = None  # type: ignore[assignment]

__all__ = ["AVAILABLE", "AttemptTracer", "Span", "capture", "restore", "server_span"]

AVAILABLE = otel_trace is not None
SCOPE = "effectusd"  # the instrumentation scope every effectusd span is created under
# A tracestate holds at most 32 members of at most 256 + 256 characters; far more than any
# real one needs. Past this the stored context keeps the traceparent alone.
MAX_TRACESTATE_CHARS = 1024
_PROPAGATOR = TraceContextTextMapPropagator() if AVAILABLE else None
Attributes = Mapping[str, str | int | bool]


def capture() -> str | None:
    """The current span's W3C trace context as the JSON text stored with a saga at submit;
    None when opentelemetry is absent or no valid span is current."""
    if otel_trace is None or not otel_trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)  # type: ignore[union-attr]
    if len(carrier.get("tracestate", "")) > MAX_TRACESTATE_CHARS:
        del carrier["tracestate"]
    return json.dumps(carrier, sort_keys=True, separators=(",", ":")) if carrier else None


def restore(stored: str | Mapping[str, str] | None) -> Context | None:
    """The context ``capture`` stored (or trace headers as received), None if there is none
    or it is unusable: a broken stored context loses the parent, never the dispatch."""
    if otel_trace is None or not stored:
        return None
    try:
        carrier = json.loads(stored) if isinstance(stored, str) else stored
    except ValueError:
        return None
    if not isinstance(carrier, Mapping):
        return None
    headers = {name: value for name in TRACE_HEADERS if isinstance(value := carrier.get(name), str)}
    context = _PROPAGATOR.extract(headers)  # type: ignore[union-attr]
    valid = otel_trace.get_current_span(context).get_span_context().is_valid
    return context if valid else None


class Span:
    """One recording span (an attempt's or the kit's); what effectusd sets on it is ids,
    classes and counts, never argument values."""

    __slots__ = ("_span",)

    def __init__(self, span: Any) -> None:
        self._span = span

    @property
    def ids(self) -> tuple[int, int]:
        """(trace id, span id), for tests and logs."""
        context = self._span.get_span_context()
        return context.trace_id, context.span_id

    def event(self, name: str, attributes: Attributes | None = None) -> None:
        self._span.add_event(name, attributes=attributes)

    def set(self, attributes: Attributes) -> None:
        self._span.set_attributes(attributes)

    def headers(self) -> dict[str, str]:
        """``traceparent`` (and ``tracestate``) naming this span as the parent."""
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=otel_trace.set_span_in_context(self._span))  # type: ignore[union-attr]
        return carrier

    def attach(self) -> object:
        """Make this span current (for instrumented HTTP clients); give the token to detach."""
        return otel_context.attach(otel_trace.set_span_in_context(self._span))

    @staticmethod
    def detach(token: object) -> None:
        otel_context.detach(token)  # type: ignore[arg-type]

    def fail(self, description: str) -> None:
        self._span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, description))

    def end(self) -> None:
        self._span.end()


class AttemptTracer:
    """Starts the daemon's attempt spans. Exists only while tracing is on."""

    __slots__ = ("_tracer",)

    def __init__(self, tracer: Any) -> None:
        self._tracer = tracer

    @classmethod
    def configured(cls, provider: object | None = None) -> AttemptTracer | None:
        """A tracer from ``provider``, else from the global provider; None when the extra is
        not installed or no provider was ever set (OpenTelemetry's proxy or no-op)."""
        if otel_trace is None:
            return None
        chosen: Any = provider if provider is not None else otel_trace.get_tracer_provider()
        if isinstance(chosen, otel_trace.ProxyTracerProvider | otel_trace.NoOpTracerProvider):
            return None
        return cls(chosen.get_tracer(SCOPE))

    def start(self, name: str, attributes: Attributes, stored: str | None, start_ns: int) -> Span:
        """A CLIENT span parented to the submit's stored context, and linked to it (a saga
        can outlive its trace's usual view; the link survives tools that cut traces by
        time). No stored context: a root span of its own."""
        parent = restore(stored)
        links = []
        if parent is not None:
            links.append(otel_trace.Link(otel_trace.get_current_span(parent).get_span_context()))
        span = self._tracer.start_span(
            name,
            context=parent if parent is not None else Context(),
            kind=otel_trace.SpanKind.CLIENT,
            attributes=attributes,
            links=links,
            start_time=start_ns,
        )
        return Span(span)


@contextmanager
def server_span(
    name: str,
    trace_headers: Mapping[str, str],
    attributes: Attributes,
    provider: object | None = None,
) -> Iterator[Span | None]:
    """Run the block under a SERVER span continuing the trace in ``trace_headers`` (the kit's
    side; ``EffectusRequest.trace_headers``); current while it runs. None without the extra.
    An exception ends it in error, named by its class alone (its message may quote data)."""
    if otel_trace is None:
        yield None
        return
    chosen: Any = provider if provider is not None else otel_trace.get_tracer_provider()
    span = chosen.get_tracer(SCOPE).start_span(
        name,
        context=restore(trace_headers) or Context(),
        kind=otel_trace.SpanKind.SERVER,
        attributes=attributes,
    )
    with otel_trace.use_span(
        span, end_on_exit=True, record_exception=False, set_status_on_exception=False
    ):
        try:
            yield Span(span)
        except BaseException as exc:
            Span(span).fail(type(exc).__name__)
            raise

"""effectusd.tracing: the trace context captured at submit comes back as the same span
context, a broken one is dropped (never an error), tracing is off without a provider or
without the extra, and config can never send a trace header of its own."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

from effectusd import tracing
from effectusd.config import ConfigError, parse_config
from effectusd.core import wire


@pytest.fixture
def provider() -> Iterator[TracerProvider]:
    provider = TracerProvider()
    yield provider
    provider.shutdown()


def _remote(context: object) -> SpanContext:
    return trace.get_current_span(context).get_span_context()  # type: ignore[arg-type]


def test_nothing_is_captured_outside_a_span() -> None:
    assert tracing.capture() is None


def test_a_captured_context_restores_to_the_same_span_context(provider: TracerProvider) -> None:
    with provider.get_tracer("t").start_as_current_span("submit") as span:
        stored = tracing.capture()
    assert stored is not None
    assert set(json.loads(stored)) == {"traceparent"}  # no tracestate, no baggage
    restored = tracing.restore(stored)
    assert restored is not None
    got, sent = _remote(restored), span.get_span_context()
    assert (got.trace_id, got.span_id, got.trace_flags) == (
        sent.trace_id,
        sent.span_id,
        sent.trace_flags,
    )
    assert got.is_remote


def test_the_tracestate_travels_and_an_oversized_one_is_dropped() -> None:
    def captured(state: TraceState) -> dict[str, str]:
        parent = SpanContext(0xABC, 0xDEF, True, TraceFlags(1), trace_state=state)
        with trace.use_span(NonRecordingSpan(parent)):
            stored = tracing.capture()
        assert stored is not None
        return dict(json.loads(stored))

    small = captured(TraceState([("vendor", "abc")]))
    assert small["tracestate"] == "vendor=abc"
    restored = tracing.restore(json.dumps(small))
    assert restored is not None and _remote(restored).trace_state.get("vendor") == "abc"
    big = TraceState([(f"k{i}", "v" * 200) for i in range(8)])
    assert set(captured(big)) == {"traceparent"}


@pytest.mark.parametrize(
    "stored",
    [None, "", "{not json", "[]", '{"traceparent": 7}', '{"traceparent": "00-zz-zz-01"}'],
)
def test_an_unusable_stored_context_is_no_parent(stored: str | None) -> None:
    assert tracing.restore(stored) is None


def test_tracing_is_off_until_a_provider_is_set(provider: TracerProvider) -> None:
    assert tracing.AttemptTracer.configured() is None  # the global one was never set
    assert tracing.AttemptTracer.configured(trace.NoOpTracerProvider()) is None
    assert tracing.AttemptTracer.configured(provider) is not None


def test_an_attempt_span_is_a_child_of_the_submit_and_links_it(provider: TracerProvider) -> None:
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("t").start_as_current_span("submit") as submit:
        stored = tracing.capture()
    tracer = tracing.AttemptTracer.configured(provider)
    assert tracer is not None
    span = tracer.start("effectusd.dispatch pay", {"effectusd.attempt": 1}, stored, 1_000)
    headers = span.headers()
    span.end()
    root = tracer.start("effectusd.dispatch pay", {}, None, 2_000)  # submitted untraced
    root.end()
    child, alone = exporter.get_finished_spans()[-2:]
    submit_context = submit.get_span_context()
    assert child.parent is not None and child.parent.span_id == submit_context.span_id
    assert [link.context.span_id for link in child.links] == [submit_context.span_id]
    assert child.start_time == 1_000 and child.kind is trace.SpanKind.CLIENT
    assert child.context is not None
    assert headers["traceparent"].split("-")[1:3] == [
        f"{child.context.trace_id:032x}",
        f"{child.context.span_id:016x}",
    ]
    assert alone.parent is None and not alone.links


def test_the_kit_reads_only_usable_trace_headers() -> None:
    headers = [
        (b"traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        (b"tracestate", b"a=1"),
        (b"tracestate", b"b=2"),  # sent twice: which one was meant? neither
    ]
    assert wire.read_trace_headers(headers) == {
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    }


@pytest.mark.parametrize("name", ["traceparent", "TraceState"])
def test_config_cannot_set_a_trace_header(name: str) -> None:
    data = {"destinations": {"d": {"base_url": "http://x", "headers": {name: "v"}}}}
    with pytest.raises(ConfigError, match="reserved header"):
        parse_config(data)


def test_without_the_extra_everything_is_a_no_op() -> None:
    script = """
import sys
sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
from effectusd import tracing
import effectusd.client, effectusd.dispatcher.daemon, effectusd.destination.asgi
assert not tracing.AVAILABLE
assert tracing.capture() is None
assert tracing.restore('{"traceparent": "x"}') is None
assert tracing.AttemptTracer.configured(object()) is None
with tracing.server_span("s", {}, {}) as span:
    assert span is None
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"

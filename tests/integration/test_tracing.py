"""OpenTelemetry tracing end to end (docs/operations.md "Tracing"), on both stores: a saga
submitted under a span, run by the real daemon against a kit destination that declines the
second step, leaves one trace: the submit's span, an attempt span per dispatch under it (with
its events), and the kit's server span under each attempt span.

Every tracer provider here is passed in explicitly; no test sets the global one, so the
daemon's default (the global provider, never set) is tracing off.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from effectusd.client import AsyncClient, Submission
from effectusd.destination import EffectusRequest, PermanentFailure
from effectusd.destination.asgi import effectus_app
from effectusd.tracing import AttemptTracer
from tests.integration.test_destination_kit import serving
from tests.support import destination
from tests.support.harness import client_for, fetch, make_config, run_until_idle

SECRET = "card-4242-4242-secret"  # an argument value: must appear in no span
PLAN = {
    "plan_id": "traced",
    "steps": [
        {
            "id": "reserve",
            "verb": "reserve",
            "args": {"card": SECRET},
            "compensate": {"verb": "release", "args": {"card": SECRET}},
        },
        {"id": "charge", "verb": "charge", "args": {"card": SECRET}, "compensate": "none"},
    ],
}
VERBS: dict[str, dict[str, Any]] = {"reserve": {}, "charge": {}, "release": {}}
EVENTS = ["claim", "write-ahead", "call", "record"]


@pytest.fixture
def traced() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def _ok(conn: sqlite3.Connection, request: EffectusRequest) -> dict[str, Any]:
    return {"done": request.effect_id}


def _decline(conn: sqlite3.Connection, request: EffectusRequest) -> dict[str, Any]:
    raise PermanentFailure("declined", status=402)


def _by_name(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    found = [span for span in spans if span.name == name]
    assert len(found) == 1, [span.name for span in spans]
    return found[0]


def _ids(span: ReadableSpan) -> tuple[int, int]:
    assert span.context is not None
    return span.context.trace_id, span.context.span_id


async def test_a_compensated_saga_is_one_trace_from_the_submit_to_the_kit(
    store_url: str, tmp_path: Path, traced: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = traced
    routes = {"/reserve": _ok, "/charge": _decline, "/release": _ok}
    kit = effectus_app(f"sqlite:///{tmp_path / 'kit.db'}", routes, tracer_provider=provider)
    async with serving(kit) as base_url:
        config = make_config(base_url, VERBS)
        with provider.get_tracer("test").start_as_current_span("checkout request"):
            saga = client_for(config, store_url).submit(PLAN, execution_id="t-1").saga_id
        await run_until_idle(config, store_url, tracer_provider=provider)
    state = fetch(store_url, "SELECT state FROM effectus_saga_instances WHERE saga_id = %s", saga)
    assert state == [{"state": "compensated"}]

    spans = list(exporter.get_finished_spans())
    trace_id, submit_id = _ids(_by_name(spans, "checkout request"))
    attempts = {
        verb: _by_name(spans, f"effectusd.dispatch {verb}") for verb in ("reserve", "charge")
    }
    attempts["release"] = _by_name(spans, "effectusd.dispatch release")
    for verb, span in attempts.items():
        assert span.kind is SpanKind.CLIENT
        assert span.parent is not None and (span.parent.trace_id, span.parent.span_id) == (
            trace_id,
            submit_id,
        ), verb
        assert [link.context.span_id for link in span.links] == [submit_id]
        assert [event.name for event in span.events] == EVENTS, verb
        attributes = span.attributes or {}
        assert attributes["effectusd.saga_id"] == saga
        assert attributes["effectusd.attempt"] == 1
        assert attributes["effectusd.destination"] == "dest"
        server = _by_name(spans, f"effectusd.destination {verb}")
        assert server.kind is SpanKind.SERVER
        assert server.parent is not None
        assert (server.parent.trace_id, server.parent.span_id) == _ids(span), verb
    forward, failed, undo = attempts["reserve"], attempts["charge"], attempts["release"]
    assert forward.start_time is not None and failed.start_time is not None
    assert undo.start_time is not None
    assert forward.start_time < failed.start_time < undo.start_time
    assert (forward.attributes or {})["effectusd.direction"] == "forward"
    assert (undo.attributes or {})["effectusd.direction"] == "compensation"
    assert (undo.attributes or {})["effectusd.effect_id"] == "reserve"
    assert forward.status.status_code is StatusCode.UNSET
    assert undo.status.status_code is StatusCode.UNSET
    assert failed.status.status_code is StatusCode.ERROR
    assert (failed.attributes or {})["effectusd.outcome"] == "permanent_failure"
    assert (failed.attributes or {})["http.response.status_code"] == 402
    # the destination's reason ("declined") is the attempt's evidence, never a trace's
    assert failed.status.description == "permanent_failure: HTTP 402"
    record = failed.events[-1].attributes or {}
    assert record["effectusd.saga_state"] == "compensating"
    declined = _by_name(spans, "effectusd.destination charge")
    assert declined.status.status_code is StatusCode.ERROR
    assert SECRET not in json.dumps([json.loads(span.to_json()) for span in spans])


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
async def test_each_transport_sends_the_attempt_span_as_traceparent(
    store_url: str, transport: str, traced: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = traced
    with destination.running() as dest:
        config = _config(dest.base_url, transport)
        with provider.get_tracer("test").start_as_current_span("submit"):
            client_for(config, store_url).submit(PLAN, execution_id=f"p-{transport}")
        await run_until_idle(config, store_url, tracer_provider=provider)
    spans = list(exporter.get_finished_spans())
    for request in dest.seen():
        span = _by_name(spans, f"effectusd.dispatch {request.headers['x-effectus-verb']}")
        trace_id, span_id = _ids(span)
        assert span.context is not None  # flags: sampled (and, in newer SDKs, random)
        flags = int(span.context.trace_flags)
        assert flags & 1
        assert request.headers["traceparent"] == f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"
    assert len(dest.seen()) == 2


async def test_tracing_off_sends_no_trace_headers(
    store_url: str, traced: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = traced
    assert AttemptTracer.configured() is None  # no global provider: the daemon's default
    with destination.running() as dest:
        config = make_config(dest.base_url, VERBS)
        # the submit is traced (its context is stored), the daemon is not
        with provider.get_tracer("test").start_as_current_span("submit"):
            saga = client_for(config, store_url).submit(PLAN, execution_id="off-1").saga_id
        await run_until_idle(config, store_url)
    stored = fetch(
        store_url, "SELECT trace_context FROM effectus_saga_instances WHERE saga_id = %s", saga
    )
    assert "traceparent" in json.loads(stored[0]["trace_context"])
    assert dest.seen()  # the calls were made
    for request in dest.seen():
        assert "traceparent" not in request.headers
        assert "tracestate" not in request.headers
    assert [span.name for span in exporter.get_finished_spans()] == ["submit"]


async def test_every_submit_stores_the_current_trace_context(
    store_url: str, traced: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, _ = traced
    config = make_config("http://127.0.0.1:9", VERBS)
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("batch") as batch:
        client_for(config, store_url).submit_many(
            [Submission(PLAN, "many-1"), Submission(PLAN, "many-2")]
        )
    with tracer.start_as_current_span("async") as one:
        await AsyncClient(config, database_url=store_url).submit(PLAN, execution_id="async-1")
    client_for(config, store_url).submit(PLAN, execution_id="untraced")
    rows = fetch(
        store_url, "SELECT execution_id, trace_context FROM effectus_saga_instances ORDER BY 1"
    )
    stored = {row["execution_id"]: row["trace_context"] for row in rows}

    def span_id(execution_id: str) -> int:
        return int(json.loads(stored[execution_id])["traceparent"].split("-")[2], 16)

    assert span_id("many-1") == span_id("many-2") == batch.get_span_context().span_id
    assert span_id("async-1") == one.get_span_context().span_id
    assert stored["untraced"] is None


def _config(base_url: str, transport: str) -> Any:
    destinations = {
        "dest": {
            "base_url": base_url,
            "timeout": "2s",
            "max_concurrency": 16,
            "transport": transport,
        }
    }
    return make_config(base_url, VERBS, destinations=destinations)

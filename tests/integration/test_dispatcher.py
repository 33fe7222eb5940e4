"""The dispatcher against a real PostgreSQL and real HTTP destinations on 127.0.0.1."""

from __future__ import annotations

import contextlib
import hashlib
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from effectusd.core.canonical import canonical_bytes
from effectusd.core.identity import idempotency_key
from effectusd.core.states import Direction
from effectusd.core.wire import KEY_ISSUED_AT, format_time
from tests.support.destination import Request, Response, ok, running
from tests.support.harness import (
    attempts_of,
    client_for,
    dispatch_of,
    fetch,
    make_config,
    run_until_idle,
    serial_plan,
)

pytestmark = pytest.mark.postgres

RESERVED = (
    "idempotency-key",
    "x-effectus-request-id",
    "x-effectus-execution-id",
    "x-effectus-saga-id",
    "x-effectus-effect-id",
    "x-effectus-attempt",
    "x-effectus-direction",
    "x-effectus-verb",
    "x-effectus-argument-hash",
    "x-effectus-contract-hash",
    "x-effectus-fencing-grants",
    "x-effectus-deadline",
    "x-effectus-key-issued-at",
)


async def test_three_step_saga_completes_and_each_step_is_called_once_with_its_identity(
    store_url: str,
) -> None:
    with running() as dest:
        config = make_config(dest.base_url, {"work": {}})
        client = client_for(config, store_url)
        saga = client.submit(serial_plan("three", ["work"] * 3), execution_id="x-1").saga_id
        await run_until_idle(config, store_url)

        view = client.get(saga)
        assert view is not None and view.state == "completed"
        assert [s.state for s in view.steps] == ["succeeded"] * 3
        assert [r.effect for r in dest.requests] == ["s1", "s2", "s3"]
        contract = config.verbs["work"].contract_hash
        for request, step in zip(dest.requests, view.steps, strict=True):
            assert all(name in request.headers for name in RESERVED)
            assert request.attempt == 1
            assert request.direction == "forward"
            assert request.headers["x-effectus-saga-id"] == saga
            assert request.headers["x-effectus-execution-id"] == "x-1"
            assert request.headers["x-effectus-contract-hash"] == contract
            assert request.headers["x-effectus-fencing-grants"] == "[]"
            assert request.key == idempotency_key(
                "default", saga, request.effect, Direction.FORWARD
            )
            assert (
                request.headers["x-effectus-argument-hash"]
                == hashlib.sha256(request.body).hexdigest()
            )
            assert request.body == canonical_bytes({"n": step.sequence + 1})
            assert step.dispatches[0].attempts[0].outcome == "success"


def fail_step(effect: str):  # type: ignore[no-untyped-def]
    def handler(request: Request) -> Response:
        if request.effect == effect and request.direction == "forward":
            return Response(422, {"error": "no"}, {"X-Effectus-Outcome": "permanent_failure"})
        return ok(request)

    return handler


async def test_permanent_failure_compensates_succeeded_steps_in_reverse_order(
    store_url: str,
) -> None:
    with running(fail_step("s3")) as dest:
        config = make_config(dest.base_url, {"do": {}, "undo": {}})
        client = client_for(config, store_url)
        plan = serial_plan(
            "rev", ["do", "do", "do"], compensate={"s1": "undo", "s2": "undo", "s3": "undo"}
        )
        saga = client.submit(plan, execution_id="x-2").saga_id
        await run_until_idle(config, store_url)

        view = client.get(saga)
        assert view is not None and view.state == "compensated"
        assert "s3" in view.stop_reason
        order = [(r.effect, r.direction) for r in dest.requests]
        assert order == [
            ("s1", "forward"),
            ("s2", "forward"),
            ("s3", "forward"),
            ("s2", "compensation"),
            ("s1", "compensation"),
        ]
        for request in dest.requests[3:]:
            assert request.key == idempotency_key(
                "default", saga, request.effect, Direction.COMPENSATION
            )
            assert request.key != idempotency_key(
                "default", saga, request.effect, Direction.FORWARD
            )
        assert [s.state for s in view.steps] == ["compensated", "compensated", "failed"]


async def test_failure_with_nothing_to_undo_ends_failed(store_url: str) -> None:
    with running(fail_step("s1")) as dest:
        config = make_config(dest.base_url, {"do": {}})
        client = client_for(config, store_url)
        saga = client.submit(serial_plan("f", ["do", "do"]), execution_id="x-3").saga_id
        await run_until_idle(config, store_url)
        view = client.get(saga)
        assert view is not None and view.state == "failed"
        assert len(dest.requests) == 1


def unknown_503(request: Request) -> Response:
    return Response(503, {"error": "upstream"})


async def test_unknown_outcome_at_least_once_retries_with_the_same_key_until_blocked(
    store_url: str,
) -> None:
    with running(unknown_503) as dest:
        verbs = {
            "pay": {
                "delivery": "at_least_once",
                "retry": {"max_attempts": 3, "initial_backoff": "10ms", "max_backoff": "20ms"},
            },
            "refund": {},
        }
        config = make_config(dest.base_url, verbs)
        client = client_for(config, store_url)
        plan = serial_plan("u", ["pay"], compensate={"s1": "refund"})
        saga = client.submit(plan, execution_id="x-4").saga_id
        await run_until_idle(config, store_url)

        assert [r.attempt for r in dest.requests] == [1, 2, 3]
        assert len({r.key for r in dest.requests}) == 1
        assert len({r.headers["x-effectus-request-id"] for r in dest.requests}) == 3
        view = client.get(saga)
        assert view is not None and view.state == "blocked_unknown"
        dispatch = dispatch_of(store_url, saga, "s1")
        assert dispatch["state"] == "blocked_unknown"
        assert dispatch["uncertain_attempt"] == 1
        # Every attempt says when its key was first issued: the dispatch's enqueue.
        created = dispatch["created_at"]
        if not isinstance(created, datetime):  # SQLite keeps REAL Unix seconds
            created = datetime.fromtimestamp(created, UTC)
        issued = {r.headers["x-effectus-key-issued-at"] for r in dest.requests}
        assert issued == {format_time(created, KEY_ISSUED_AT)}
        assert not [r for r in dest.requests if r.direction == "compensation"]


async def test_unknown_outcome_at_most_once_blocks_after_one_call(store_url: str) -> None:
    with running(unknown_503) as dest:
        config = make_config(dest.base_url, {"pay": {"retry": {"max_attempts": 5}}, "refund": {}})
        client = client_for(config, store_url)
        saga = client.submit(
            serial_plan("m", ["pay"], {"s1": "refund"}), execution_id="x-5"
        ).saga_id
        await run_until_idle(config, store_url)

        assert len(dest.requests) == 1
        view = client.get(saga)
        assert view is not None and view.state == "blocked_unknown"
        assert "at_most_once" in view.stop_reason
        [attempt] = attempts_of(store_url, saga, "s1")
        assert attempt["outcome"] == "unknown_outcome" and attempt["status_code"] == 503


async def test_commit_then_stall_past_timeout_is_unknown_and_the_retry_carries_the_same_key(
    store_url: str,
) -> None:
    committed: list[str] = []
    release = threading.Event()

    def commit_then_stall(request: Request) -> Response:
        if request.attempt == 1:
            committed.append(request.key)  # the business mutation happened
            return Response(200, {"ok": True}, stall=release)
        return Response(200, {"replayed": request.key in committed})

    with running(commit_then_stall) as dest:
        verbs = {
            "pay": {
                "delivery": "at_least_once",
                "timeout": "300ms",
                "retry": {"max_attempts": 3, "initial_backoff": "10ms"},
            }
        }
        config = make_config(dest.base_url, verbs)
        client = client_for(config, store_url)
        saga = client.submit(serial_plan("stall", ["pay"]), execution_id="x-6").saga_id
        try:
            await run_until_idle(config, store_url)
        finally:
            release.set()
        attempts = attempts_of(store_url, saga, "s1")
        assert [a["outcome"] for a in attempts] == ["unknown_outcome", "success"]
        assert dest.requests[0].key == dest.requests[1].key
        view = client.get(saga)
        assert view is not None and view.state == "completed"
        assert view.steps[0].result == {"replayed": True}


@contextlib.contextmanager
def refusing_port() -> Iterator[int]:
    """A port bound but never listening: connections to it are refused, and no other process
    (another test worker's server, say) can take it while it is held."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


async def test_connection_refused_is_retried_past_max_attempts_until_give_up_after(
    store_url: str,
) -> None:
    with running() as dest, refusing_port() as port:
        config = make_config(
            dest.base_url,
            {
                "ok": {},
                "undo": {},
                "gone": {
                    "destination": "down",
                    "retry": {
                        "max_attempts": 3,
                        "initial_backoff": "10ms",
                        "max_backoff": "40ms",
                        "give_up_after": "400ms",
                    },
                },
            },
            destinations={"down": {"base_url": f"http://127.0.0.1:{port}"}},
        )
        client = client_for(config, store_url)
        plan = serial_plan("refused", ["ok", "gone"], compensate={"s1": "undo"})
        saga = client.submit(plan, execution_id="x-7").saga_id
        await run_until_idle(config, store_url)

        attempts = attempts_of(store_url, saga, "s2")
        # never sent, so max_attempts (3) did not stop it: the time budget did
        assert len(attempts) > 3
        assert {a["outcome"] for a in attempts} == {"retryable_failure_known_not_committed"}
        assert {a["evidence"]["sent"] for a in attempts} == {"not_sent"}
        view = client.get(saga)
        assert view is not None and view.state == "compensated"
        assert view.stop_reason is not None and "give_up_after" in view.stop_reason
        assert [(r.effect, r.direction) for r in dest.requests] == [
            ("s1", "forward"),
            ("s1", "compensation"),
        ]


async def test_arguments_cannot_set_reserved_headers(store_url: str) -> None:
    with running() as dest:
        config = make_config(dest.base_url, {"work": {}})
        client = client_for(config, store_url)
        plan = {
            "plan_id": "inject",
            "steps": [
                {
                    "id": "s1",
                    "verb": "work",
                    "compensate": "none",
                    "args": {
                        "Idempotency-Key": "forged",
                        "X-Effectus-Attempt": "99",
                        "headers": {"Idempotency-Key": "forged"},
                    },
                }
            ],
        }
        saga = client.submit(plan, execution_id="x-8").saga_id
        await run_until_idle(config, store_url)
        [request] = dest.requests
        assert request.key == idempotency_key("default", saga, "s1", Direction.FORWARD)
        assert request.attempt == 1
        assert request.json()["Idempotency-Key"] == "forged"  # it stays an argument, nothing more


async def test_contract_drift_blocks_before_anything_is_sent(store_url: str) -> None:
    with running() as dest:
        config = make_config(dest.base_url, {"work": {}})
        client = client_for(config, store_url)
        saga = client.submit(serial_plan("drift", ["work"]), execution_id="x-9").saga_id
        drifted = make_config(dest.base_url, {"work": {"version": 2}})
        await run_until_idle(drifted, store_url)

        assert dest.requests == []
        view = client.get(saga)
        assert view is not None and view.state == "blocked_contract"
        assert dispatch_of(store_url, saga, "s1")["state"] == "blocked_contract"
        [attempt] = attempts_of(store_url, saga, "s1")
        assert attempt["sent_at"] is None and attempt["settled_by"] == "guard"


async def test_every_transition_is_on_the_timeline(store_url: str) -> None:
    with running() as dest:
        config = make_config(dest.base_url, {"work": {}})
        client = client_for(config, store_url)
        saga = client.submit(serial_plan("tl", ["work", "work"]), execution_id="x-10").saga_id
        await run_until_idle(config, store_url)
        timeline = client.get(saga).timeline
        assert [e.kind for e in timeline] == [
            "saga_submitted",
            "dispatch_enqueued",
            "dispatch_claimed",
            "attempt_settled",
            "step_state",
            "step_state",
            "dispatch_enqueued",
            "dispatch_claimed",
            "attempt_settled",
            "step_state",
            "saga_state",
        ]
        # the claims and settlements are read from the attempt rows, the enqueues from the
        # outbox rows, and so are the chain's step moves (every step_state here) and the
        # saga's completion (from the last settlement's attempt row); the submission is the
        # one stored event
        stored = fetch(
            store_url,
            "SELECT event_id FROM effectus_saga_events WHERE saga_id = %s ORDER BY event_id",
            saga,
        )
        from_rows = {
            "dispatch_claimed",
            "attempt_settled",
            "dispatch_enqueued",
            "step_state",
            "saga_state",
        }
        assert [e.event_id for e in timeline if e.kind not in from_rows] == [
            row["event_id"] for row in stored
        ]
        assert all(e.event_id < 0 for e in timeline if e.kind in from_rows)


def unstorable_answers(request: Request) -> Response:
    """200 answers PostgreSQL cannot store (U+0000, a lone surrogate) for the poison verbs."""
    if request.path == "/nul":
        return Response(200, {"note": "a\x00b"})
    if request.path == "/surrogate":
        return Response(200, {"note": "\ud800"})
    return ok(request)


async def test_an_answer_the_store_cannot_hold_blocks_its_saga_and_no_other(
    store_url: str,
) -> None:
    with running(unstorable_answers) as dest:
        config = make_config(dest.base_url, {"nul": {}, "surrogate": {}, "work": {}})
        client = client_for(config, store_url)
        poisoned = [
            client.submit(serial_plan(verb, [verb]), execution_id=f"p-{verb}").saga_id
            for verb in ("nul", "surrogate")
        ]
        healthy = client.submit(serial_plan("h", ["work"] * 2), execution_id="h-1").saga_id
        await run_until_idle(config, store_url)

        view = client.get(healthy)
        assert view is not None and view.state == "completed"
        for saga in poisoned:
            view = client.get(saga)
            assert view is not None and view.state == "blocked_unknown"
            [attempt] = attempts_of(store_url, saga, "s1")
            assert attempt["outcome"] == "unknown_outcome"
            assert "cannot be stored" in attempt["error"]
        assert len(dest.requests) == 4  # each poisoned call once (at_most_once), two healthy

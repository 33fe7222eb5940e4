"""Reconciliation probes on every store (docs/design.md section 7, Probes): a blocked_unknown
dispatch of a verb with a probe is asked about over real HTTP (a scripted destination on
127.0.0.1), and what the answer means is settled as ``resolve`` would, by the actor ``probe``,
or kept on the timeline while the dispatch stays blocked for a person."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from effectusd.cli import render
from effectusd.config import Config
from effectusd.console import pages
from effectusd.core.states import OutcomeClass
from effectusd.dispatcher.metrics import Metrics
from effectusd.dispatcher.probes import Prober
from effectusd.executors.factory import executor_for
from effectusd.operator import Resolution, resolve
from effectusd.operator.probes import UNPROBED_GRACE, Settled, take_probes
from effectusd.store.dispatch import DispatchStore
from tests.conformance.support import (
    StoreUnderTest,
    claim_one,
    completion,
    dispatch_in,
    step,
    step_states,
)
from tests.support.destination import Destination, Request, Response, running
from tests.support.harness import daemon_running, make_config, serial_plan

RETRY = {"max_attempts": 3, "initial_backoff": "10s", "max_backoff": "1m"}
PROBE = {
    "path": "/keys/{key}/{args.n}",
    "committed": [200],
    "not_committed": [404],
    "result": "/answer/body",
    "after": "0s",
    "every": "1m",
    "max_probes": 2,
}
TOKEN = "probe-token-0123456789"
RESULT_SCHEMA = {"type": "object", "required": ["charge_id"]}


def probe_config(base_url: str, *, honours_deadline: bool = False) -> Config:
    verbs = {
        "pay": {"retry": RETRY, "probe": PROBE, "result_schema": RESULT_SCHEMA},
        "undo": {"retry": RETRY, "probe": {**PROBE, "result": None}},
    }
    return make_config(
        base_url,
        verbs,
        destinations={
            "dest": {
                "base_url": base_url,
                "timeout": "2s",
                "honours_deadline": honours_deadline,
                "headers": {"X-Team": "checkout"},
                "bearer_token_env": "PROBE_TOKEN",
            }
        },
    )


def answering(status: int, body: Any = None) -> Any:
    """A destination whose GETs (probes) answer ``status`` with ``body``."""

    def handler(request: Request) -> Response:
        return Response(status, body) if request.method == "GET" else Response(500)

    return handler


def committed(request: Request) -> Response:
    key = request.path.split("/")[2]
    return Response(
        200, {"key": key, "state": "committed", "answer": {"body": {"charge_id": "c-1"}}}
    )


@asynccontextmanager
async def blocked(
    store: StoreUnderTest, handler: Any, *, honours_deadline: bool = False
) -> AsyncIterator[tuple[str, DispatchStore, Destination, Prober]]:
    """A one-step saga (with an inverse) blocked_unknown after one at_most_once attempt whose
    deadline is long past, and a prober asking ``handler``'s destination about it."""
    with running(handler) as destination:
        store.config = probe_config(destination.base_url, honours_deadline=honours_deadline)
        saga = store.submit(serial_plan("p", ["pay", "pay"], {"s1": "undo"}), "x")
        # A claim whose lease (the deadline) ended two minutes ago: the store's clock decides,
        # and a claim's row is never rewritten, so the lease margin puts it in the past.
        late = await store.dispatch_store(owner="daemon-late", lease_margin_s=-120.0)
        claim = await claim_one(late)
        report = await late.record([completion(claim, OutcomeClass.UNKNOWN)])
        assert report.applied == 1 and store.view(saga)["state"] == "blocked_unknown"
        daemon = await store.dispatch_store()
        executor = executor_for(
            "dest", store.config.destinations["dest"], environ={"PROBE_TOKEN": TOKEN}
        )
        try:
            yield (
                saga,
                daemon,
                destination,
                Prober(store.config, daemon.session, {"dest": executor}, Metrics()),
            )
        finally:
            await executor.aclose()


def probes_due_now(store: StoreUnderTest) -> None:
    """Bring every pending probe to now (instead of waiting out `every`)."""
    store.execute(
        "UPDATE effectus_dispatch_probes SET next_probe_at = "
        f"{store.now_sql()} - {store.seconds_sql(1)} WHERE next_probe_at IS NOT NULL"
    )


def probe_events(view: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in view["timeline"] if e["kind"].startswith("probe_")]


def gets(destination: Destination) -> list[Request]:
    return [r for r in destination.requests if r.method == "GET"]


async def test_a_committed_probe_settles_the_step_as_success_with_its_result(
    store: StoreUnderTest,
) -> None:
    async with blocked(store, committed) as (saga, _, destination, prober):
        assert await prober.once() == [Settled.COMMITTED]
        view = store.view(saga)
    assert view["state"] == "running" and step_states(view) == {
        "s1": "succeeded",
        "s2": "in_progress",
    }
    assert view["steps"][0]["result"] == {"charge_id": "c-1"}
    s1 = dispatch_in(view, "s1")
    assert (s1["state"], s1["uncertain_attempt"], len(s1["attempts"])) == ("succeeded", None, 1)
    [probe] = gets(destination)
    assert probe.path == f"/keys/{s1['idempotency_key']}/1" and probe.body == b""
    assert probe.headers["idempotency-key"] == s1["idempotency_key"]
    # the destination's own headers and credentials, as a call has them; a request ID of its own
    assert probe.headers["authorization"] == f"Bearer {TOKEN}"
    assert probe.headers["x-team"] == "checkout"
    assert probe.headers["x-effectus-attempt"] == "1"
    assert probe.headers["x-effectus-request-id"] != s1["attempts"][0]["request_id"]
    assert TOKEN not in str(view)
    scheduled, answered = probe_events(view)
    assert scheduled["kind"] == "probe_scheduled" and scheduled["actor"] == "probe"
    assert (answered["kind"], answered["actor"]) == ("probe_answered", "probe")
    assert (answered["from_state"], answered["to_state"]) == ("blocked_unknown", "succeeded")
    assert answered["detail"]["status"] == 200 and answered["evidence"] == "HTTP 200: committed"
    assert "c-1" in answered["detail"]["evidence"]["answer"]
    exposition = prober.metrics.exposition().decode()
    assert 'effectusd_probes_total{answer="scheduled",verb="pay"} 1.0' in exposition
    assert 'effectusd_probes_total{answer="committed",verb="pay"} 1.0' in exposition


async def test_not_committed_where_the_destination_honours_deadlines_retries_under_the_same_key(
    store: StoreUnderTest,
) -> None:
    async with blocked(store, answering(404), honours_deadline=True) as (saga, daemon, _, prober):
        assert await prober.once() == [Settled.NOT_COMMITTED]
        view = store.view(saga)
        s1 = dispatch_in(view, "s1")
        assert view["state"] == "running"
        assert (s1["state"], s1["uncertain_attempt"]) == ("retry_wait", None)
        store.make_due()
        again, _ = await step(daemon, OutcomeClass.SUCCESS, result={"charge_id": "c-2"})
        assert (again.attempt, again.idempotency_key) == (2, s1["idempotency_key"])
        await step(daemon, OutcomeClass.SUCCESS, result={"charge_id": "c-3"})
        assert store.view(saga)["state"] == "completed"
    [answered] = [e for e in probe_events(view) if e["kind"] == "probe_answered"]
    assert answered["to_state"] == "retry_wait" and answered["detail"]["verdict"] == "not_committed"


async def test_not_committed_without_honours_deadline_stays_blocked_with_the_probe_on_its_timeline(
    store: StoreUnderTest,
) -> None:
    async with blocked(store, answering(404)) as (saga, _, _, prober):
        assert await prober.once() == [Settled.KEPT_BLOCKED]
        assert await prober.once() == []  # asked again only after `every`
        view = store.view(saga)
    assert view["state"] == "blocked_unknown"
    assert dispatch_in(view, "s1")["state"] == "blocked_unknown"
    [answered] = [e for e in probe_events(view) if e["kind"] == "probe_answered"]
    assert answered["to_state"] is None and answered["detail"]["verdict"] == "keep_blocked"
    assert "does not declare honours_deadline" in answered["evidence"]


async def test_an_answer_that_is_neither_keeps_the_dispatch_blocked(store: StoreUnderTest) -> None:
    async with blocked(store, answering(409, {"state": "in_progress"}), honours_deadline=True) as (
        saga,
        _,
        _,
        prober,
    ):
        assert await prober.once() == [Settled.KEPT_BLOCKED]
        view = store.view(saga)
    assert view["state"] == "blocked_unknown"
    [answered] = [e for e in probe_events(view) if e["kind"] == "probe_answered"]
    assert answered["detail"]["status"] == 409
    assert answered["evidence"] == "HTTP 409: neither committed nor not committed"


async def test_a_committed_answer_whose_result_breaks_the_schema_keeps_the_dispatch_blocked(
    store: StoreUnderTest,
) -> None:
    body = {"answer": {"body": {"no_charge": True}}}
    async with blocked(store, answering(200, body)) as (saga, _, _, prober):
        assert await prober.once() == [Settled.KEPT_BLOCKED]
        view = store.view(saga)
    assert view["state"] == "blocked_unknown" and view["steps"][0]["result"] is None
    [answered] = [e for e in probe_events(view) if e["kind"] == "probe_answered"]
    assert "does not match the verb's result_schema" in answered["evidence"]


async def test_a_transport_error_keeps_the_dispatch_blocked(store: StoreUnderTest) -> None:
    async with blocked(store, committed) as (saga, _, destination, prober):
        assert destination.server is not None
        destination.server.shutdown()
        destination.server.server_close()  # nothing listens on the port any more
        assert await prober.once() == [Settled.KEPT_BLOCKED]
        view = store.view(saga)
    assert view["state"] == "blocked_unknown"
    [answered] = [e for e in probe_events(view) if e["kind"] == "probe_answered"]
    assert answered["detail"]["status"] is None
    assert answered["evidence"].startswith("no answer: ")


async def test_max_probes_spent_gives_up_once_and_asks_no_more(store: StoreUnderTest) -> None:
    async with blocked(store, answering(500)) as (saga, _, destination, prober):
        assert await prober.once() == [Settled.KEPT_BLOCKED]
        probes_due_now(store)
        assert await prober.once() == [Settled.GIVEN_UP]
        probes_due_now(store)
        assert await prober.once() == []
        view = store.view(saga)
        assert len(gets(destination)) == 2
    assert view["state"] == "blocked_unknown"
    kinds = [e["kind"] for e in probe_events(view)]
    assert kinds == ["probe_scheduled", "probe_answered", "probe_given_up"]
    given_up = probe_events(view)[-1]
    assert given_up["detail"]["probe"] == 2 and "max_probes 2 spent" in given_up["evidence"]
    # sagas show and the console's saga page put every probe on the timeline
    text = render.saga_detail(store.typed_view(saga))
    assert "probe_given_up s1/forward #1  [probe]  evidence: HTTP 500: neither" in text
    assert text.count("probe_answered s1/forward #1  [probe]") == 1
    page = str(pages.saga_detail(view, None))
    assert all(kind in page for kind in ("probe_scheduled", "probe_answered", "probe_given_up"))


async def test_a_probe_of_a_dispatch_resolved_meanwhile_is_evidence_only(
    store: StoreUnderTest,
) -> None:
    async with blocked(store, answering(404), honours_deadline=True) as (saga, _, _, prober):
        taken = await prober.session.write(take_probes(prober.probes, 10))
        [ticket] = taken.tickets
        store.run(
            resolve(
                saga,
                "s1",
                Resolution.COMMITTED,
                registry=store.registry,
                actor="user:ops",
                evidence="found it in the ledger",
                result={"charge_id": "c-9"},
            )
        )
        before = store.view(saga)
        assert await prober.probe(ticket) is Settled.MOVED_ON
        view = store.view(saga)
        probes_due_now(store)
        assert await prober.once() == []  # closed: never asked again
    assert view["state"] == before["state"] == "running"
    assert dispatch_in(view, "s1") == dispatch_in(before, "s1")
    assert view["steps"][0]["result"] == {"charge_id": "c-9"}
    [answered] = [e for e in probe_events(view) if e["kind"] == "probe_answered"]
    assert answered["to_state"] is None and answered["detail"]["guard"].startswith("missed")


async def test_two_daemons_never_take_the_same_probe(store: StoreUnderTest) -> None:
    async with blocked(store, answering(404)) as (_, _, _, prober):
        other = await store.dispatch_store(owner="daemon-b")
        first = await prober.session.write(take_probes(prober.probes, 10))
        second = await other.session.write(take_probes(prober.probes, 10))
    assert [t.row["effect_id"] for t in first.tickets] == ["s1"]
    assert second.tickets == [] and second.scheduled == []


async def test_a_hostile_answer_touches_its_own_saga_only(store: StoreUnderTest) -> None:
    async with blocked(store, committed) as (saga, _, destination, prober):
        other = store.submit(serial_plan("p", ["pay", "pay"], {"s1": "undo"}), "y")
        late = await store.dispatch_store(owner="daemon-late-2", lease_margin_s=-120.0)
        claim = await claim_one(late)
        await late.record([completion(claim, OutcomeClass.UNKNOWN)])
        hostile = dispatch_in(store.view(saga), "s1")["idempotency_key"]

        def answer(request: Request) -> Response:
            if hostile in request.path:  # a body no store can hold (U+0000)
                return Response(200, {"answer": {"body": {"charge_id": "\u0000"}}})
            return committed(request)

        destination.handler = answer
        assert sorted(await prober.once()) == [Settled.COMMITTED, Settled.KEPT_BLOCKED]
        view, other_view = store.view(saga), store.view(other)
    assert view["state"] == "blocked_unknown" and other_view["state"] == "running"
    assert other_view["steps"][0]["result"] == {"charge_id": "c-1"}
    [answered] = [e for e in probe_events(view) if e["kind"] == "probe_answered"]
    assert (
        "cannot be stored" in answered["evidence"]
        and "answer" not in answered["detail"]["evidence"]
    )


async def test_a_redirect_is_not_followed_and_keeps_the_dispatch_blocked(
    store: StoreUnderTest,
) -> None:
    moved = answering(302, None)
    async with blocked(store, moved) as (saga, _, destination, prober):
        assert await prober.once() == [Settled.KEPT_BLOCKED]
        view = store.view(saga)
        assert len(gets(destination)) == 1
    [answered] = [e for e in probe_events(view) if e["kind"] == "probe_answered"]
    assert answered["evidence"] == "HTTP 302: neither committed nor not committed"


async def test_a_blocked_compensation_probed_committed_is_compensated(
    store: StoreUnderTest,
) -> None:
    async with blocked(store, committed) as (saga, daemon, _, prober):
        store.run(
            resolve(
                saga,
                "s1",
                Resolution.COMMITTED,
                registry=store.registry,
                actor="user:ops",
                evidence="charged",
                result={"charge_id": "c-0"},
            )
        )
        await step(daemon, OutcomeClass.PERMANENT)  # s2 fails: s1 is compensated
        late = await store.dispatch_store(owner="daemon-late-3", lease_margin_s=-120.0)
        claim = await claim_one(late)
        assert (claim.effect_id, claim.direction) == ("s1", "compensation")
        await late.record([completion(claim, OutcomeClass.UNKNOWN)])
        assert store.view(saga)["state"] == "blocked_unknown"
        assert await prober.once() == [Settled.COMMITTED]
        view = store.view(saga)
    assert view["state"] == "compensated" and step_states(view)["s1"] == "compensated"
    answered = [e for e in probe_events(view) if e["kind"] == "probe_answered"]
    assert [(e["direction"], e["to_state"]) for e in answered] == [("compensation", "succeeded")]


async def test_probes_of_a_verb_whose_probe_was_removed_are_given_up_saying_why(
    store: StoreUnderTest,
) -> None:
    async with blocked(store, answering(500)) as (saga, daemon, destination, prober):
        assert await prober.once() == [Settled.KEPT_BLOCKED]
        asked = len(gets(destination))
        # the next daemon's configuration: pay without its probe (undo keeps one)
        verbs = {"pay": {"retry": RETRY}, "undo": {"retry": RETRY, "probe": PROBE}}
        config = make_config(destination.base_url, verbs)
        metrics = Metrics()
        without = Prober(config, daemon.session, {}, metrics)
        probes_due_now(store)
        assert await without.take() == []
        # due for less than the grace: kept for a daemon that has the probe (a rolling deploy)
        assert metrics.probes.labels("pay", "given_up")._value.get() == 0
        [(kept,)] = store.execute("SELECT next_probe_at FROM effectus_dispatch_probes")
        assert kept is not None
        grace = UNPROBED_GRACE.total_seconds() + 1
        store.execute(
            "UPDATE effectus_dispatch_probes SET next_probe_at = "
            f"{store.now_sql()} - {store.seconds_sql(grace)}"
        )
        assert await without.take() == []  # logged and counted as given up
        again = await daemon.session.write(take_probes(without.probes, 10))
        probes_due_now(store)  # a closed row is never due again, whatever its time says
        assert await without.once() == []
        view = store.view(saga)
        [row] = store.execute("SELECT next_probe_at, given_up_at FROM effectus_dispatch_probes")
    assert metrics.probes.labels("pay", "given_up")._value.get() == 1
    assert again.given_up == [] and again.tickets == []
    assert len(gets(destination)) == asked  # nothing was asked after the probe went
    assert row[0] is None and row[1] is not None
    assert view["state"] == "blocked_unknown"
    given_up = probe_events(view)[-1]
    assert given_up["kind"] == "probe_given_up" and given_up["actor"] == "probe"
    assert given_up["evidence"] == (
        "verb pay has no probe in the configuration now ([verbs.pay.probe] removed, or the "
        "verb): its probes are closed"
    )
    assert given_up["detail"]["closed"] == "no_probe"


async def test_a_daemon_with_no_probe_at_all_closes_the_probes_of_a_removed_probe_config(
    store: StoreUnderTest,
) -> None:
    async with blocked(store, answering(500)) as (saga, _, destination, prober):
        assert await prober.once() == [Settled.KEPT_BLOCKED]
        grace = UNPROBED_GRACE.total_seconds() + 1
        store.execute(
            "UPDATE effectus_dispatch_probes SET next_probe_at = "
            f"{store.now_sql()} - {store.seconds_sql(grace)}"
        )
        # the next configuration: no verb has a probe any more
        config = make_config(destination.base_url, {"pay": {"retry": RETRY}, "undo": {}})
        async with daemon_running(config, store.url) as daemon:
            deadline = time.monotonic() + 20
            while not store.execute(
                "SELECT 1 FROM effectus_dispatch_probes WHERE given_up_at IS NOT NULL"
            ):
                assert time.monotonic() < deadline, "the orphaned probe was never closed"
                await asyncio.sleep(0.05)
        view = store.view(saga)
        given_up = daemon.metrics.probes.labels("pay", "given_up")._value.get()
    assert given_up == 1
    assert view["state"] == "blocked_unknown"
    assert probe_events(view)[-1]["detail"]["closed"] == "no_probe"

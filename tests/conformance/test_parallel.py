"""Parallel steps on every store (docs/design.md section 4, "Parallel steps"; issue 17): the
roots enqueued at submit, steps that became ready enqueued together, a failed branch's unsent
siblings canceled and those in flight waited for, compensation in the reverse of the order the
steps succeeded, blocks per branch and the operator commands per branch."""

from __future__ import annotations

from typing import Any

from effectusd.cli import render
from effectusd.core.states import OutcomeClass
from effectusd.operator import Resolution, cancel, resolve, retry
from effectusd.store.dispatch import DispatchStore
from effectusd.store.records import Claim
from tests.conformance.support import (
    StoreUnderTest,
    completion,
    dispatch_in,
    has_dispatch,
    send,
    step,
    step_states,
    timeline,
)
from tests.support.harness import serial_plan

SUCCESS = OutcomeClass.SUCCESS
PERMANENT = OutcomeClass.PERMANENT
UNKNOWN = OutcomeClass.UNKNOWN
OPS = "user:ops"
UNDO = {"verb": "undo", "args": {"n": 0}}


def fan_plan(*, slow_sibling: bool = False) -> dict[str, Any]:
    """hold, then a, b and c together (at_most_once), then join after all three. With
    ``slow_sibling``, d runs beside them on the other destination, which the tests never
    claim: a sibling that stays queued."""
    steps: list[dict[str, Any]] = [
        {"id": "hold", "verb": "pay_alo", "args": {"n": 0}, "compensate": UNDO},
    ]
    branches = ["a", "b", "c"]
    for name in branches:
        steps.append(
            {"id": name, "verb": "pay", "args": {"n": name}, "compensate": UNDO, "after": ["hold"]}
        )
    if slow_sibling:
        steps.append(
            {"id": "d", "verb": "ship", "args": {"n": "d"}, "compensate": UNDO, "after": ["hold"]}
        )
    steps.append(
        {"id": "join", "verb": "pay_alo", "args": {"n": 9}, "compensate": "none", "after": branches}
    )
    return {"plan_id": "fan", "steps": steps}


async def fan_out(
    store: StoreUnderTest, **plan: Any
) -> tuple[str, DispatchStore, dict[str, Claim]]:
    """A saga whose `hold` succeeded and whose a, b and c are claimed and sent."""
    saga = store.submit(fan_plan(**plan), "x")
    daemon = await store.dispatch_store()
    await step(daemon, SUCCESS, result={"id": "hold"})
    claims = {c.effect_id: c for c in await daemon.claim({"dest": 3})}
    assert sorted(claims) == ["a", "b", "c"]
    for claim in claims.values():
        await send(daemon, claim)
    return saga, daemon, claims


async def record(daemon: DispatchStore, claim: Claim, outcome: OutcomeClass) -> None:
    report = await daemon.record([completion(claim, outcome, result={"id": claim.effect_id})])
    assert (report.applied, report.late, report.dropped) == (1, 0, 0), report


def enqueued(view: dict[str, Any], direction: str) -> list[str]:
    return [
        effect for _, effect, way, *_ in timeline(view, "dispatch_enqueued") if way == direction
    ]


async def compensate_all(store: StoreUnderTest, daemon: DispatchStore, saga: str) -> None:
    while store.view(saga)["state"] == "compensating":
        await step(daemon, SUCCESS)


async def test_a_fan_out_enqueues_the_ready_steps_together_and_completes(
    store: StoreUnderTest,
) -> None:
    saga = store.submit(fan_plan(), "x")
    view = store.view(saga)
    assert step_states(view)["hold"] == "in_progress"
    assert {s["effect_id"]: s["after"] for s in view["steps"]} == {
        "hold": [],
        "a": ["hold"],
        "b": ["hold"],
        "c": ["hold"],
        "join": ["a", "b", "c"],
    }
    drawn = [line.split() for line in render.saga_detail(store.typed_view(saga)).splitlines()]
    assert ["1.", "a", "pending", "pay", "(after", "hold)"] in drawn
    assert ["4.", "join", "pending", "pay_alo", "(after", "a,", "b,", "c)"] in drawn
    assert ["0.", "hold", "in_progress", "pay_alo", "(at", "once)"] in drawn
    daemon = await store.dispatch_store()
    await step(daemon, SUCCESS, result={"id": "hold"})
    assert enqueued(store.view(saga), "forward") == ["hold", "a", "b", "c"]
    claims = await daemon.claim({"dest": 3})
    for claim in claims:
        await send(daemon, claim)

    # One transition per saga per batch: the siblings' answers are deferred, never lost.
    report = await daemon.record(
        [completion(c, SUCCESS, result={"id": c.effect_id}) for c in claims]
    )
    assert (report.applied, len(report.deferred)) == (1, 2)
    report = await daemon.record(report.deferred)
    assert (report.applied, len(report.deferred)) == (1, 1)
    assert step_states(store.view(saga))["join"] == "pending"  # one branch is still running
    report = await daemon.record(report.deferred)
    assert (report.applied, report.deferred) == (1, [])
    assert step_states(store.view(saga))["join"] == "in_progress"

    await step(daemon, SUCCESS)
    view = store.view(saga)
    assert view["state"] == "completed"
    orders = {s["effect_id"]: s["succeeded_order"] for s in view["steps"]}
    assert orders["hold"] == 1 and orders["join"] == 5
    assert sorted(orders[name] for name in "abc") == [2, 3, 4]
    assert [orders[c.effect_id] for c in claims] == [2, 3, 4]  # the order they were recorded

    sequential_id = store.submit(serial_plan("p", ["pay", "pay"]), "y")
    sequential = store.view(sequential_id)
    assert [s["after"] for s in sequential["steps"]] == [[], ["s1"]]
    assert "(after" not in render.saga_detail(store.typed_view(sequential_id))  # as before


async def test_a_failed_branch_cancels_unsent_siblings_waits_for_those_in_flight_and_compensates_in_reverse_success_order(  # noqa: E501
    store: StoreUnderTest,
) -> None:
    saga, daemon, claims = await fan_out(store, slow_sibling=True)
    await record(daemon, claims["c"], SUCCESS)
    await record(daemon, claims["a"], PERMANENT)

    view = store.view(saga)
    assert view["state"] == "compensating"
    assert "'a' failed" in view["stop_reason"]
    assert dispatch_in(view, "d")["state"] == "canceled"  # on the other destination, unsent
    assert dispatch_in(view, "d")["attempt"] == 0
    assert ("dispatch_canceled", "d", "forward", None, "queued", "canceled") in timeline(view)
    assert dispatch_in(view, "b")["state"] == "in_flight"  # waited for, not canceled
    assert enqueued(view, "compensation") == []  # nothing is undone while b may succeed
    assert step_states(view) == {
        "hold": "succeeded",
        "a": "failed",
        "b": "in_progress",
        "c": "succeeded",
        "d": "pending",
        "join": "pending",
    }

    await record(daemon, claims["b"], SUCCESS)  # the latest success: undone first
    await compensate_all(store, daemon, saga)
    view = store.view(saga)
    assert view["state"] == "compensated"
    assert enqueued(view, "compensation") == ["b", "c", "hold"]
    assert not has_dispatch(view, "join")
    assert not has_dispatch(view, "d", "compensation")
    assert step_states(view)["d"] == "pending"


async def test_an_unknown_outcome_blocks_naming_the_branch_and_each_branch_is_resolved_alone(
    store: StoreUnderTest,
) -> None:
    saga, daemon, claims = await fan_out(store)
    await record(daemon, claims["a"], UNKNOWN)
    view = store.view(saga)
    assert view["state"] == "blocked_unknown"
    assert view["stop_reason"].startswith("a (forward): at_most_once")
    await record(daemon, claims["b"], UNKNOWN)
    assert "also blocked: a (forward, blocked_unknown)" in store.view(saga)["stop_reason"]
    await record(daemon, claims["c"], SUCCESS)  # recorded, but nothing starts while blocked
    view = store.view(saga)
    assert view["state"] == "blocked_unknown"
    assert step_states(view)["c"] == "succeeded" and step_states(view)["join"] == "pending"

    def settle(effect: str) -> Any:
        return store.run(
            resolve(
                saga,
                effect,
                Resolution.COMMITTED,
                registry=store.registry,
                actor=OPS,
                evidence=f"the ledger has {effect}",
                result={"id": effect},
            )
        )

    report = settle("a")
    assert report.saga_state == {"from": "blocked_unknown", "to": "blocked_unknown"}
    view = store.view(saga)
    assert view["stop_reason"] == "still blocked: b (forward, blocked_unknown)"
    assert step_states(view)["join"] == "pending"
    report = settle("b")
    assert report.saga_state == {"from": "blocked_unknown", "to": "running"}
    assert step_states(store.view(saga))["join"] == "in_progress"
    await step(daemon, SUCCESS)
    assert store.view(saga)["state"] == "completed"


async def test_sending_one_branch_again_keeps_the_saga_blocked_by_another(
    store: StoreUnderTest,
) -> None:
    saga, daemon, claims = await fan_out(store)
    await record(daemon, claims["a"], OutcomeClass.STALE_FENCE)
    await record(daemon, claims["b"], UNKNOWN)
    assert store.view(saga)["state"] == "blocked_unknown"  # the latest block

    report = store.run(
        resolve(
            saga,
            "b",
            Resolution.RETRY,
            registry=store.registry,
            actor=OPS,
            evidence="not in the ledger",
        )
    )
    assert report.saga_state == {"from": "blocked_unknown", "to": "blocked_fence"}
    view = store.view(saga)
    assert view["stop_reason"] == "still blocked: a (forward, blocked_fence)"
    assert dispatch_in(view, "b")["state"] == "retry_wait"

    report = store.run(retry(saga, registry=store.registry, actor=OPS, evidence=None))
    assert report.effect_id == "a"
    assert report.saga_state == {"from": "blocked_fence", "to": "running"}
    await record(daemon, claims["c"], SUCCESS)
    store.make_due()
    for claim in await daemon.claim({"dest": 2}):
        await send(daemon, claim)
        await record(daemon, claim, SUCCESS)
    assert step_states(store.view(saga))["join"] == "in_progress"


async def test_cancel_mid_fan_out_cancels_every_unsent_branch_and_waits_for_the_one_in_flight(
    store: StoreUnderTest,
) -> None:
    saga = store.submit(fan_plan(), "x")
    daemon = await store.dispatch_store()
    await step(daemon, SUCCESS, result={"id": "hold"})
    [sent] = await daemon.claim({"dest": 1})
    await send(daemon, sent)
    unsent = sorted({"a", "b", "c"} - {sent.effect_id})

    report = store.run(cancel(saga, registry=store.registry, actor=OPS, evidence="order void"))
    assert report.decision == "cancel_now"
    assert report.effect_id == unsent[-1]  # the newest unsent one; the engine did the other
    assert report.saga_state == {"from": "running", "to": "compensating"}
    view = store.view(saga)
    for name in unsent:
        assert dispatch_in(view, name)["state"] == "canceled"
        assert step_states(view)[name] == "pending"
    assert ("dispatch_canceled", unsent[0], "forward", None, "queued", "canceled") in timeline(view)
    assert dispatch_in(view, sent.effect_id)["state"] == "in_flight"
    assert enqueued(view, "compensation") == []

    await record(daemon, sent, SUCCESS)
    await compensate_all(store, daemon, saga)
    view = store.view(saga)
    assert view["state"] == "compensated"
    assert enqueued(view, "compensation") == [sent.effect_id, "hold"]
    assert view["stop_reason"] == f"canceled by {OPS}: order void"

"""Operator actions as store operations: resolve, retry, cancel (one guarded transaction each)
and prune, on every store."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any

import pytest

from effectusd.core.states import Direction, OutcomeClass
from effectusd.operator import RefusalKind, Refused, Resolution, cancel, prune, resolve, retry
from effectusd.store import operations
from tests.conformance.support import (
    StoreUnderTest,
    claim_one,
    completion,
    dispatch_in,
    has_dispatch,
    send,
    step,
    step_states,
    timeline,
)
from tests.support import backends
from tests.support.harness import serial_plan

OPS = "user:ops"


async def _blocked_unknown(store: StoreUnderTest) -> str:
    saga = store.submit(serial_plan("p", ["pay", "pay"], {"s1": "undo"}), "x")
    daemon = await store.dispatch_store()
    await step(daemon, OutcomeClass.UNKNOWN)
    assert store.view(saga)["state"] == "blocked_unknown"
    return saga


async def test_resolve_committed_settles_as_success_and_the_saga_moves_on(
    store: StoreUnderTest,
) -> None:
    saga = await _blocked_unknown(store)
    report = store.run(
        resolve(
            saga,
            "s1",
            Resolution.COMMITTED,
            registry=store.registry,
            actor=OPS,
            evidence="the ledger shows charge c-1",
            result={"charge": "c-1"},
        )
    )
    assert report.saga_state == {"from": "blocked_unknown", "to": "running"}
    assert report.dispatch_state == {"from": "blocked_unknown", "to": "succeeded"}
    assert json.loads(json.dumps(report.as_dict()))["ok"] is True  # what --json prints
    view = store.view(saga)
    assert view["state"] == "running" and view["stop_reason"] is None
    assert step_states(view) == {"s1": "succeeded", "s2": "in_progress"}
    assert view["steps"][0]["result"] == {"charge": "c-1"}
    s1 = dispatch_in(view, "s1")
    assert (s1["state"], s1["uncertain_attempt"]) == ("succeeded", None)
    assert s1["attempts"][0]["outcome"] == "unknown_outcome"  # the call's own outcome stays
    assert dispatch_in(view, "s2")["state"] == "queued"
    [resolved] = [e for e in view["timeline"] if e["kind"] == "operator_resolve"]
    assert (resolved["actor"], resolved["evidence"]) == (OPS, "the ledger shows charge c-1")
    assert (resolved["from_state"], resolved["to_state"]) == ("blocked_unknown", "succeeded")


async def _one_step_resolved(
    store: StoreUnderTest, resolution: Resolution
) -> tuple[str, dict[str, Any]]:
    """The block's stop reason, and the view of a one-step saga after ``resolution``."""
    saga = store.submit(serial_plan("p", ["pay"]), "x")
    await step(await store.dispatch_store(), OutcomeClass.UNKNOWN)
    blocked = store.view(saga)["stop_reason"]
    assert "at_most_once" in blocked
    return blocked, _resolved_by_ops(store, saga, resolution)


def _resolved_by_ops(
    store: StoreUnderTest, saga: str, resolution: Resolution, direction: Direction | None = None
) -> dict[str, Any]:
    """The view of ``saga`` after OPS resolved its step s1 as ``resolution``."""
    found, registry = "looked at the destination", store.registry
    store.run(
        resolve(
            saga,
            "s1",
            resolution,
            registry=registry,
            actor=OPS,
            evidence=found,
            direction=direction,
        )
    )
    return store.view(saga)


async def test_a_saga_completed_by_a_resolution_says_who_resolved_it_not_why_it_blocked(
    store: StoreUnderTest,
) -> None:
    blocked, view = await _one_step_resolved(store, Resolution.COMMITTED)
    assert (view["state"], view["stop_reason"]) == ("completed", f"resolved by {OPS} as committed")
    reasons = [e["detail"].get("reason") for e in view["timeline"] if e["kind"] == "saga_state"]
    assert blocked in reasons  # the block's reason stays on the timeline
    assert reasons[-1] == f"resolved by {OPS} as committed"


async def test_a_saga_failed_by_a_resolution_says_who_resolved_it_and_why_it_failed(
    store: StoreUnderTest,
) -> None:
    _, view = await _one_step_resolved(store, Resolution.FAIL)
    assert view["state"] == "failed"
    assert view["stop_reason"].startswith(f"resolved by {OPS} as not committed; step 's1' failed")


async def test_resolve_not_committed_retry_sends_again_with_the_same_key(
    store: StoreUnderTest,
) -> None:
    saga = await _blocked_unknown(store)
    store.run(
        resolve(
            saga,
            "s1",
            Resolution.RETRY,
            registry=store.registry,
            actor=OPS,
            evidence="not in the ledger",
        )
    )
    view = store.view(saga)
    assert view["state"] == "running" and dispatch_in(view, "s1")["state"] == "retry_wait"
    again = await claim_one(await store.dispatch_store(owner="daemon-b"))
    assert (again.effect_id, again.attempt) == ("s1", 2)
    assert again.idempotency_key == dispatch_in(view, "s1")["idempotency_key"]


async def test_a_refused_action_names_the_state_and_writes_nothing(store: StoreUnderTest) -> None:
    saga = store.submit(serial_plan("p", ["pay"]), "x")
    before = store.view(saga)
    with pytest.raises(Refused, match="running"):
        store.run(
            resolve(
                saga,
                "s1",
                Resolution.COMMITTED,
                registry=store.registry,
                actor=OPS,
                evidence="x",
            )
        )
    with pytest.raises(Refused, match="running"):
        store.run(retry(saga, registry=store.registry, actor=OPS, evidence=None))
    with pytest.raises(Refused, match="not found"):
        store.run(cancel("0" * 64, registry=store.registry, actor=OPS, evidence=None))
    assert store.view(saga) == before


async def test_retry_sends_a_blocked_fence_dispatch_again(store: StoreUnderTest) -> None:
    saga = store.submit(serial_plan("p", ["pay"]), "x")
    daemon = await store.dispatch_store()
    await step(daemon, OutcomeClass.STALE_FENCE)
    report = store.run(retry(saga, registry=store.registry, actor=OPS, evidence="fence fixed"))
    assert report.saga_state == {"from": "blocked_fence", "to": "running"}
    assert dispatch_in(store.view(saga), "s1")["state"] == "retry_wait"
    claim, _ = await step(daemon, OutcomeClass.SUCCESS)
    assert claim.attempt == 2
    view = store.view(saga)
    assert view["state"] == "completed"
    assert [e[0] for e in timeline(view, "operator_retry")] == ["operator_retry"]


async def test_retry_of_a_blocked_compensation_compensates(store: StoreUnderTest) -> None:
    saga = store.submit(serial_plan("p", ["pay", "pay"], {"s1": "undo"}), "x")
    daemon = await store.dispatch_store()
    await step(daemon, OutcomeClass.SUCCESS)
    await step(daemon, OutcomeClass.PERMANENT)
    await step(daemon, OutcomeClass.PERMANENT)  # the compensation fails
    assert store.view(saga)["state"] == "blocked_compensation"
    store.run(retry(saga, registry=store.registry, actor=OPS, evidence="refunds open again"))
    assert store.view(saga)["state"] == "compensating"
    claim, _ = await step(daemon, OutcomeClass.SUCCESS)
    assert (claim.effect_id, claim.direction.value, claim.attempt) == ("s1", "compensation", 2)
    assert store.view(saga)["state"] == "compensated"


async def _blocked_compensation(store: StoreUnderTest) -> str:
    """s1, s2 succeed, s3 fails, s2's compensation fails permanently."""
    plan = serial_plan("p", ["pay", "pay", "pay"], {"s1": "undo", "s2": "undo"})
    saga = store.submit(plan, "x")
    daemon = await store.dispatch_store()
    await step(daemon, OutcomeClass.SUCCESS)
    await step(daemon, OutcomeClass.SUCCESS)
    await step(daemon, OutcomeClass.PERMANENT)
    claim, _ = await step(daemon, OutcomeClass.PERMANENT)
    assert (claim.effect_id, claim.direction.value) == ("s2", "compensation")
    assert store.view(saga)["state"] == "blocked_compensation"
    return saga


async def test_resolve_a_failed_compensation_undone_by_hand_compensates_the_rest(
    store: StoreUnderTest,
) -> None:
    saga = await _blocked_compensation(store)
    assert store.view(saga)["next_actions"][1] == (
        f"effectusd resolve {saga} s2 --direction compensation --committed "
        "--evidence 'HOW IT WAS UNDONE'"
    )
    report = store.run(
        resolve(
            saga,
            "s2",
            Resolution.COMMITTED,
            registry=store.registry,
            actor=OPS,
            evidence="refunded by hand, ticket 42",
            direction=Direction.COMPENSATION,
        )
    )
    assert report.saga_state == {"from": "blocked_compensation", "to": "compensating"}
    assert report.dispatch_state == {"from": "failed_permanent", "to": "succeeded"}
    assert report.enqueued[0]["effect_id"] == "s1"
    view = store.view(saga)
    assert step_states(view) == {"s1": "compensating", "s2": "compensated", "s3": "failed"}
    s2 = dispatch_in(view, "s2", "compensation")
    assert s2["state"] == "succeeded"
    assert s2["attempts"][0]["outcome"] == "permanent_failure"  # the call's own outcome stays
    [resolved] = [e for e in view["timeline"] if e["kind"] == "operator_resolve"]
    assert (resolved["actor"], resolved["evidence"]) == (OPS, "refunded by hand, ticket 42")
    assert (resolved["direction"], resolved["from_state"], resolved["to_state"]) == (
        "compensation",
        "failed_permanent",
        "succeeded",
    )

    daemon = await store.dispatch_store(owner="daemon-b")
    claim, _ = await step(daemon, OutcomeClass.SUCCESS)
    assert (claim.effect_id, claim.direction.value) == ("s1", "compensation")
    view = store.view(saga)
    assert view["state"] == "compensated"
    assert view["stop_reason"].startswith("step 's3' failed")  # why compensation began


async def test_a_saga_compensated_by_a_resolution_says_who_and_why_compensation_began(
    store: StoreUnderTest,
) -> None:
    saga = store.submit(serial_plan("p", ["pay", "pay"], {"s1": "undo"}), "x")
    daemon = await store.dispatch_store()
    await step(daemon, OutcomeClass.SUCCESS)
    await step(daemon, OutcomeClass.PERMANENT, error="declined")
    began = store.view(saga)["stop_reason"]
    await step(daemon, OutcomeClass.PERMANENT)  # the undo of s1 fails: blocked_compensation
    view = _resolved_by_ops(store, saga, Resolution.COMMITTED, Direction.COMPENSATION)
    assert view["state"] == "compensated"
    assert view["stop_reason"] == f"resolved by {OPS} as committed; {began}"


async def test_resolve_a_failed_compensation_refuses_what_does_not_fit(
    store: StoreUnderTest,
) -> None:
    saga = await _blocked_compensation(store)
    before = store.view(saga)

    def refused(effect: str, decision: Resolution, direction: Direction | None) -> Refused:
        with pytest.raises(Refused) as caught:
            store.run(
                resolve(
                    saga,
                    effect,
                    decision,
                    registry=store.registry,
                    actor=OPS,
                    evidence="x",
                    direction=direction,
                )
            )
        return caught.value

    assert "--direction compensation" in refused("s2", Resolution.COMMITTED, None).message
    assert "already failed" in refused("s2", Resolution.FAIL, Direction.COMPENSATION).message
    assert "'s2'" in refused("s1", Resolution.COMMITTED, None).message  # names the blocked one
    assert refused("s1", Resolution.COMMITTED, Direction.COMPENSATION).kind is (
        RefusalKind.NOT_FOUND  # s1 has no compensation dispatch yet
    )
    assert store.view(saga) == before


async def test_resolve_a_failed_compensation_not_committed_retry_sends_it_again(
    store: StoreUnderTest,
) -> None:
    saga = await _blocked_compensation(store)
    report = store.run(
        resolve(
            saga,
            "s2",
            Resolution.RETRY,
            registry=store.registry,
            actor=OPS,
            evidence="refunds open again",
            direction=Direction.COMPENSATION,
        )
    )
    assert report.dispatch_state == {"from": "failed_permanent", "to": "retry_wait"}
    assert store.view(saga)["state"] == "compensating"
    claim, _ = await step(await store.dispatch_store(owner="daemon-b"), OutcomeClass.SUCCESS)
    assert (claim.effect_id, claim.direction.value, claim.attempt) == ("s2", "compensation", 2)


async def test_cancel_before_anything_was_claimed_ends_compensated(
    store: StoreUnderTest,
) -> None:
    saga = store.submit(serial_plan("p", ["pay", "pay"], {"s1": "undo"}), "x")
    report = store.run(cancel(saga, registry=store.registry, actor=OPS, evidence="customer"))
    assert report.decision == "cancel_now"
    view = store.view(saga)
    assert view["state"] == "compensated" and view["cancel_requested_by"] == OPS
    s1 = dispatch_in(view, "s1")
    assert (s1["state"], s1["attempt"]) == ("canceled", 0)
    assert step_states(view) == {"s1": "pending", "s2": "pending"}
    daemon = await store.dispatch_store()
    assert await daemon.claim({"dest": 10}) == []
    [canceled] = [e for e in view["timeline"] if e["kind"] == "operator_cancel"]
    assert (canceled["actor"], canceled["evidence"], canceled["to_state"]) == (
        OPS,
        "customer",
        "canceled",
    )


async def test_cancel_in_flight_only_flags_and_compensation_follows_the_success(
    store: StoreUnderTest,
) -> None:
    saga = store.submit(serial_plan("p", ["pay", "pay"], {"s1": "undo"}), "x")
    daemon = await store.dispatch_store()
    claim = await claim_one(daemon)
    report = store.run(cancel(saga, registry=store.registry, actor=OPS, evidence=None))
    assert report.decision == "flag_only"
    assert dispatch_in(store.view(saga), "s1")["state"] == "in_flight"

    await send(daemon, claim)
    await daemon.record([completion(claim, OutcomeClass.SUCCESS)])
    view = store.view(saga)
    assert view["state"] == "compensating"  # not s2: the cancel request wins
    assert not has_dispatch(view, "s2")
    assert dispatch_in(view, "s1", "compensation")["state"] == "queued"
    await step(daemon, OutcomeClass.SUCCESS)
    view = store.view(saga)
    assert view["state"] == "compensated" and "cancel" in view["stop_reason"]


async def test_prune_deletes_only_finished_sagas_older_than_the_cutoff(
    store: StoreUnderTest,
) -> None:
    daemon = await store.dispatch_store()
    old = store.submit(serial_plan("p", ["pay"]), "old")
    await step(daemon, OutcomeClass.SUCCESS)
    fresh = store.submit(serial_plan("p", ["pay"]), "fresh")
    await step(daemon, OutcomeClass.SUCCESS)
    blocked = store.submit(serial_plan("p", ["pay"]), "blocked")
    await step(daemon, OutcomeClass.UNKNOWN)
    running = store.submit(serial_plan("p", ["pay"]), "running")
    store.backdate_finished(old, 7200)
    store.backdate_finished(fresh, 60)

    with store.connect() as conn:
        preview = prune(store.backend, conn, timedelta(hours=1), batch_size=1, dry_run=True)
    assert (preview.count, [s["saga_id"] for s in preview.sagas]) == (1, [old])
    assert store.view(old)  # a dry run deletes nothing
    printed = json.loads(json.dumps(preview.as_dict()))  # what --json prints
    assert [s["saga_id"] for s in printed["sagas"]] == [old]

    with store.connect() as conn:
        report = prune(store.backend, conn, timedelta(hours=1), batch_size=1, dry_run=False)
    assert (report.count, report.batches, report.by_state) == (1, 1, {"completed": 1})
    assert json.loads(json.dumps(report.as_dict()))["count"] == 1
    assert store.run(operations.load_saga(old)) is None
    remaining = {row["saga_id"] for row in store.run(operations.list_sagas())}
    assert remaining == {fresh, blocked, running}
    for table in ("effectus_saga_events", "effectus_saga_outbox", "effectus_saga_steps"):
        mark = "?" if store.sqlite else "%s"
        rows = store.execute(f"SELECT count(*) FROM {table} WHERE saga_id = {mark}", (old,))
        assert rows == [(0,)], table  # the saga's rows went with it
    assert store.execute("SELECT count(*) FROM effectus_saga_attempts") == [(2,)]  # fresh, blocked


async def test_two_racing_resolutions_one_wins_the_other_is_refused(
    store: StoreUnderTest,
) -> None:
    saga = await _blocked_unknown(store)
    start = threading.Barrier(2)
    outcomes: list[object] = []
    lock = threading.Lock()

    def operator(decision: Resolution) -> None:
        with store.connect() as conn:  # each operator its own connection
            start.wait(timeout=30)
            try:
                report: object = backends.run(
                    conn,
                    resolve(
                        saga,
                        "s1",
                        decision,
                        registry=store.registry,
                        actor=f"user:{decision.value}",
                        evidence="checked",
                    ),
                )
            except Refused as refused:
                report = refused
            with lock:
                outcomes.append(report)

    threads = [
        threading.Thread(target=operator, args=(decision,))
        for decision in (Resolution.COMMITTED, Resolution.FAIL)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    refused = [o for o in outcomes if isinstance(o, Refused)]
    applied = [o for o in outcomes if not isinstance(o, Refused)]
    assert (len(applied), len(refused)) == (1, 1), outcomes
    assert refused[0].kind is RefusalKind.CONFLICT  # it saw what the winner committed
    [winner] = applied
    view = store.view(saga)
    assert [e["actor"] for e in view["timeline"] if e["kind"] == "operator_resolve"] == [
        winner.actor  # type: ignore[attr-defined]
    ]
    committed = winner.decision == Resolution.COMMITTED.value  # type: ignore[attr-defined]
    assert view["state"] == ("running" if committed else "failed")

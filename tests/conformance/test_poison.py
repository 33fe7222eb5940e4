"""A completion the store cannot record is isolated: the rest of its batch commits, and its
own saga alone stops in blocked_unknown with the failure as evidence (both stores)."""

from __future__ import annotations

import asyncio
import time

from effectusd.core.states import OutcomeClass
from effectusd.operator import Resolution, resolve
from tests.conformance.support import (
    StoreUnderTest,
    completion,
    dispatch_in,
    pipeline_on,
    pipeline_with_destination,
    sagas_with_one_unfenceable,
    send,
)
from tests.support.harness import serial_plan


async def test_one_unstorable_result_is_quarantined_and_the_batch_commits(
    store: StoreUnderTest,
) -> None:
    sagas = [store.submit(serial_plan("p", ["pay", "pay"]), f"x-{i}") for i in range(7)]
    daemon = await store.dispatch_store()
    claims = await daemon.claim({"dest": 16})
    assert len(claims) == 7
    for claim in claims:
        await send(daemon, claim)
    poison = claims[3]
    batch = [
        completion(
            claim,
            OutcomeClass.SUCCESS,
            # Infinity is not JSON: neither store can hold it as a result
            result={"amount": float("inf")} if claim is poison else {"ok": True},
        )
        for claim in claims
    ]
    pipeline = pipeline_on(daemon, store)
    await asyncio.wait_for(
        pipeline.recorder.record(batch), timeout=60
    )  # once, a retry loop forever

    for saga in sagas:
        view = store.view(saga)
        if saga == poison.saga_id:
            assert view["state"] == "blocked_unknown"
            assert "could not be recorded" in view["stop_reason"]
            dispatch = dispatch_in(view, "s1")
            assert dispatch["state"] == "blocked_unknown"
            [attempt] = dispatch["attempts"]
            assert attempt["outcome"] == "unknown_outcome"
            assert attempt["evidence"]["unrecorded_outcome"] == "success"
            assert attempt["evidence"]["record_failure"]
            assert dispatch["lease_owner"] is None
        else:
            assert view["state"] == "running"
            assert dispatch_in(view, "s1")["state"] == "succeeded"
            assert dispatch_in(view, "s2")["state"] == "queued"
    assert pipeline.metrics.poison_isolated._value.get() == 1


async def test_a_batch_that_does_not_commit_gives_back_every_slot_its_recorder_took(
    store: StoreUnderTest,
) -> None:
    """With the recorder claiming next steps (where the store can): the batch's first
    transaction takes a slot for each next step, then fails on the poison; its parts commit
    and claim again. Once their calls end, no slot is left taken, and each healthy saga's
    next step was called once."""
    sagas = [store.submit(serial_plan("p", ["pay", "pay"]), f"x-{i}") for i in range(7)]
    daemon = await store.dispatch_store()
    claims = await daemon.claim({"dest": 16})
    for claim in claims:
        await send(daemon, claim)
    poison = claims[3]
    batch = [
        completion(claim, OutcomeClass.SUCCESS, result=[float("nan")] if claim is poison else 1)
        for claim in claims
    ]
    async with pipeline_with_destination(daemon, store) as (pipeline, dest):
        pipeline.claiming = True
        await asyncio.wait_for(pipeline.recorder.record(batch), timeout=60)
        await asyncio.wait_for(asyncio.gather(*pipeline.calls), timeout=60)
        healthy = [saga for saga in sagas if saga != poison.saga_id]
        called = sorted(r.headers["x-effectus-saga-id"] for r in dest.requests)
        assert called == (sorted(healthy) if daemon.claims_in_record else [])
        assert pipeline.recorder.waiting == len(called)
        pipeline.claiming = False
        while pipeline.recorder.waiting:
            await pipeline.recorder.round()

    assert pipeline.capacity.busy == 0
    assert store.view(poison.saga_id)["state"] == "blocked_unknown"
    if daemon.claims_in_record:
        assert all(store.view(saga)["state"] == "completed" for saga in healthy)


async def test_a_quarantined_saga_is_resolved_by_the_operator_with_evidence(
    store: StoreUnderTest,
) -> None:
    saga = store.submit(serial_plan("p", ["pay", "pay"]), "x")
    daemon = await store.dispatch_store()
    [claim] = await daemon.claim({"dest": 16})
    await send(daemon, claim)
    pipeline = pipeline_on(daemon, store)
    await pipeline.recorder.record([completion(claim, OutcomeClass.SUCCESS, result=[float("nan")])])
    assert store.view(saga)["state"] == "blocked_unknown"

    store.run(
        resolve(
            saga,
            "s1",
            Resolution.COMMITTED,
            registry=store.registry,
            actor="user:ops",
            evidence="checked the destination's ledger",
            result={"fixed": True},
        )
    )
    view = store.view(saga)
    assert view["state"] == "running"
    assert dispatch_in(view, "s2")["state"] == "queued"


async def test_a_failed_write_ahead_is_counted_and_the_batch_is_called(
    store: StoreUnderTest,
) -> None:
    sagas, _ = sagas_with_one_unfenceable(store)
    daemon = await store.dispatch_store()
    async with pipeline_with_destination(daemon, store) as (pipeline, dest):
        claims = await daemon.claim({"dest": 10})
        for claim in claims:
            pipeline.capacity.take(claim.destination)
        await pipeline.dispatch_batch(claims, time.monotonic())
    assert sorted(r.headers["x-effectus-saga-id"] for r in dest.requests) == sorted(
        [sagas[0], sagas[2]]
    )
    assert pipeline.metrics.write_ahead_failures._value.get() == 1
    assert pipeline.metrics.fencing_conflicts._value.get() == 0
    assert pipeline.recorder.waiting == 3 and pipeline.capacity.busy == 0

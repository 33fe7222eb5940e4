"""A slot is free again when its call ends, before its outcome is recorded: while the recorder
is behind (UNRECORDED_LIMIT outcomes waiting), no new call starts, from the claim loop or from
the recorder, so the answers held only in memory stay bounded however slow the recording
(both stores)."""

from __future__ import annotations

import asyncio

from effectusd.core.engine import Completion
from effectusd.core.states import OutcomeClass
from effectusd.core.transition import HeldClaim
from effectusd.dispatcher.pipeline import Pipeline
from effectusd.dispatcher.recorder import UNRECORDED_LIMIT
from tests.conformance.support import (
    StoreUnderTest,
    claim_one,
    completion,
    dispatch_in,
    pipeline_on,
    pipeline_with_destination,
    send,
)
from tests.support.harness import serial_plan


def waiting_outcomes(pipeline: Pipeline, n: int) -> None:
    """``n`` outcomes waiting to be recorded, of dispatches that do not exist: recording them
    changes nothing (the store drops them)."""
    for i in range(n):
        outcome = Completion.answered(HeldClaim(-1 - i, 1, None), OutcomeClass.SUCCESS)
        pipeline.recorder.put(outcome)


async def test_the_claim_loop_claims_nothing_while_the_recorder_is_behind(
    store: StoreUnderTest,
) -> None:
    saga = store.submit(serial_plan("p", ["pay"]), "x-1")
    daemon = await store.dispatch_store()
    async with pipeline_with_destination(daemon, store) as (pipeline, dest):
        waiting_outcomes(pipeline, UNRECORDED_LIMIT)

        assert pipeline.free() == {}
        assert await pipeline.claim_once() == 0
        assert dispatch_in(store.view(saga), "s1")["state"] == "queued"

        # One record round takes a batch off the queue: below the limit, the claim loop it
        # held back is woken, and claims again.
        pipeline.wake.clear()
        await pipeline.recorder.round()
        assert not pipeline.recorder.behind and pipeline.wake.is_set()
        assert await pipeline.claim_once() == 1
        await asyncio.wait_for(asyncio.gather(*pipeline.calls), timeout=60)
        assert [r.headers["x-effectus-saga-id"] for r in dest.requests] == [saga]


async def test_the_recorder_claims_no_next_step_while_it_is_behind(
    store: StoreUnderTest,
) -> None:
    """Where the store claims next steps in the record (PostgreSQL), a free slot would take
    this one; while the recorder is behind it is written queued instead, for later."""
    saga = store.submit(serial_plan("p", ["pay", "pay"]), "x-1")
    daemon = await store.dispatch_store()
    claim = await claim_one(daemon)
    await send(daemon, claim)
    pipeline = pipeline_on(daemon, store)
    pipeline.claiming = True
    waiting_outcomes(pipeline, UNRECORDED_LIMIT)

    await asyncio.wait_for(pipeline.recorder.record([completion(claim, OutcomeClass.SUCCESS)]), 60)

    assert pipeline.calls == set()
    view = store.view(saga)
    assert dispatch_in(view, "s1")["state"] == "succeeded"
    assert dispatch_in(view, "s2")["state"] == "queued"
    assert pipeline.capacity.busy == 0

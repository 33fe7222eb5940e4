"""A pruned saga leaves a tombstone of its identity: a later submit of the same identity (which
would send the same idempotency keys, and get the old saga's answers from a destination that
still remembers them) is refused, until prune deletes the tombstone. On every store."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from effectusd import EffectusError, SagaPruned, SubmitConflict
from effectusd.client import AsyncClient, Submission
from effectusd.core.states import OutcomeClass
from effectusd.operator import prune
from effectusd.store import operations
from tests.conformance.support import StoreUnderTest, step
from tests.support.harness import serial_plan

PLAN = serial_plan("order", ["pay"])
DAY = 86400.0


def _mark(store: StoreUnderTest) -> str:
    return "?" if store.sqlite else "%s"


async def _pruned(store: StoreUnderTest, execution_id: str = "order-7") -> tuple[str, datetime]:
    """A saga that completed two hours ago and was pruned; its id and finished_at."""
    daemon = await store.dispatch_store()
    saga = store.submit(PLAN, execution_id)
    await step(daemon, OutcomeClass.SUCCESS)
    store.backdate_finished(saga, 7200)
    finished_at = store.view(saga)["finished_at"]
    with store.connect() as conn:
        report = prune(store.backend, conn, timedelta(hours=1), batch_size=10, dry_run=False)
    assert report.count == 1 and store.run(operations.load_saga(saga)) is None
    return saga, finished_at


def _tombstones(store: StoreUnderTest) -> list[tuple[object, ...]]:
    return store.execute(
        "SELECT saga_id, namespace, execution_id, plan_id, plan_digest, facts_hash, state,"
        " finished_at IS NOT NULL, pruned_at IS NOT NULL FROM effectus_saga_tombstones"
        " ORDER BY saga_id"
    )


async def test_prune_leaves_a_tombstone_of_each_pruned_sagas_identity(
    store: StoreUnderTest,
) -> None:
    saga, _ = await _pruned(store)
    store.submit(PLAN, "live")
    with store.connect() as conn:  # a saga that is not finished is not pruned: no tombstone
        assert prune(store.backend, conn, timedelta(0), batch_size=10, dry_run=False).count == 0
    [tombstone] = _tombstones(store)
    checked = store.client()._prepare(PLAN, "order-7", {})
    assert tombstone == (
        saga,
        "default",
        "order-7",
        "order",
        checked.plan_digest,
        checked.facts_hash,
        "completed",
        True,
        True,
    )


async def test_a_submit_of_a_pruned_identity_is_refused_naming_when_it_finished(
    store: StoreUnderTest,
) -> None:
    saga, finished_at = await _pruned(store)
    before = store.execute("SELECT count(*) FROM effectus_saga_outbox")

    with pytest.raises(SagaPruned) as refused:
        store.submit(PLAN, "order-7")
    message = str(refused.value)
    assert saga in message and "pruned at" in message
    assert f"finished completed at {finished_at}" in message
    assert isinstance(refused.value, SubmitConflict) and isinstance(refused.value, EffectusError)
    with pytest.raises(SagaPruned):
        store.client().submit_many([Submission(PLAN, "order-8"), Submission(PLAN, "order-7")])
    with pytest.raises(SagaPruned):
        await AsyncClient(store.config, database_url=store.url).submit(PLAN, execution_id="order-7")

    assert store.run(operations.load_saga(saga)) is None  # nothing was written
    assert store.execute("SELECT count(*) FROM effectus_saga_instances") == [(0,)]
    assert store.execute("SELECT count(*) FROM effectus_saga_outbox") == before
    assert store.submit(PLAN, "order-8") != saga  # another execution id is fine


async def test_prune_deletes_tombstones_older_than_keep_tombstones_and_frees_the_identity(
    store: StoreUnderTest,
) -> None:
    old, _ = await _pruned(store, "old")
    recent, _ = await _pruned(store, "recent")
    mark = _mark(store)
    store.execute(
        "UPDATE effectus_saga_tombstones SET pruned_at = pruned_at - "
        f"{store.seconds_sql(31 * DAY)} WHERE saga_id = {mark}",
        (old,),
    )
    month = timedelta(days=30)

    with store.connect() as conn:
        kept = prune(store.backend, conn, timedelta(hours=1), batch_size=10, dry_run=False)
        preview = prune(
            store.backend, conn, timedelta(hours=1), 10, dry_run=True, keep_tombstones=month
        )
    assert (kept.tombstone_cutoff, kept.tombstones) == (None, 0)  # not asked: all kept
    assert (preview.tombstones, preview.as_dict()["tombstones_deleted"]) == (1, 1)
    assert len(_tombstones(store)) == 2  # a dry run deletes nothing

    with store.connect() as conn:
        report = prune(
            store.backend, conn, timedelta(hours=1), 10, dry_run=False, keep_tombstones=month
        )
    assert report.tombstones == 1
    assert [row[0] for row in _tombstones(store)] == [recent]
    assert "deleted 1 tombstone(s)" in report.summary()

    again = store.client().submit(PLAN, execution_id="old")  # the identity is free again
    assert (again.saga_id, again.created) == (old, True)
    with pytest.raises(SagaPruned):
        store.submit(PLAN, "recent")


async def test_a_saga_deleted_by_hand_leaves_a_tombstone_too(store: StoreUnderTest) -> None:
    saga = store.submit(PLAN, "order-7")
    store.execute(f"DELETE FROM effectus_saga_instances WHERE saga_id = {_mark(store)}", (saga,))

    [tombstone] = _tombstones(store)
    assert tombstone[0] == saga and tombstone[6:] == ("running", False, True)
    with pytest.raises(SagaPruned, match="was deleted while running"):
        store.submit(PLAN, "order-7")

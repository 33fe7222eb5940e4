"""The recorder's locks on PostgreSQL, when another writer holds one of its sagas: the record
waits for it, then reads every row of its batch as that writer left it."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from effectusd.client import Client, Submission
from effectusd.store.operations import lock_sagas_params
from tests.integration.test_dispatcher_leases import wait_for
from tests.integration.test_fencing import lock_waiters
from tests.support.backends import postgres_sql as sql
from tests.support.harness import make_config, serial_plan

pytestmark = pytest.mark.postgres

BATCH = 256  # a full record batch (recorder.RECORD_BATCH)
# The join the planner may pick between the batch's saga ids and the saga rows, each forced
# by turning the other two off (which one it picks follows the tables' size and statistics).
JOINS = {
    "nested loop": ("enable_hashjoin", "enable_mergejoin"),
    "hash": ("enable_nestloop", "enable_mergejoin"),
    "merge": ("enable_nestloop", "enable_hashjoin"),
}


def lock_sagas(db: str, dispatch_ids: list[int], planner_off: tuple[str, ...]) -> list[Any]:
    """lock_sagas.sql as the recorder runs it (in its own transaction), under ``planner_off``."""
    with psycopg.connect(db) as conn:
        for setting in planner_off:
            conn.execute(f"SET {setting} = off")
        params = lock_sagas_params(dispatch_ids=dispatch_ids)
        return conn.execute(sql("lock_sagas"), params).fetchall()


@pytest.mark.parametrize("join", list(JOINS))
async def test_the_recorder_locks_every_saga_of_its_batch_after_waiting_for_a_writer_of_one(
    db: str, join: str
) -> None:
    """lock_sagas locks the sagas of the dispatches a record settles. One of them changed by
    another transaction meanwhile (a reclaim settling the same saga) makes it wait, then take
    that saga's row as committed. Found through a join, the row could drop out on that
    re-check (with a nested loop over the batch's ids): its completion then had no facts, and
    the whole batch failed and split to find it, or quarantined a healthy saga."""
    config = make_config("http://127.0.0.1:9", {"pay": {}})
    plan = serial_plan("p", ["pay"])
    Client(config, database_url=db).submit_many(Submission(plan, f"x-{i}") for i in range(BATCH))
    with psycopg.connect(db) as conn:
        outbox = conn.execute("SELECT dispatch_id, saga_id FROM effectus_saga_outbox").fetchall()
    dispatch_ids = [dispatch_id for dispatch_id, _ in outbox]
    held = outbox[BATCH // 2][1]
    with psycopg.connect(db) as writer:
        writer.execute(
            "UPDATE effectus_saga_instances SET updated_at = now() WHERE saga_id = %s", (held,)
        )
        locking = asyncio.create_task(asyncio.to_thread(lock_sagas, db, dispatch_ids, JOINS[join]))
        await wait_for(lambda: lock_waiters(db) == 1 or locking.done())
        assert not locking.done(), locking  # it waits for the writer
        writer.commit()
        rows = await asyncio.wait_for(locking, timeout=60)
    assert len(rows) == BATCH

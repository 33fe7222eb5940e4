"""The write-ahead's row lock and what it writes. On PostgreSQL the guard is checked on the
outbox row under FOR SHARE and the row is rewritten only when something on it changes
(write_ahead.sql); what a dispatch shows (its grants, its fence wait) stays the same on both
stores."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from effectusd.core.states import OutcomeClass
from tests.conformance.support import (
    StoreUnderTest,
    claim_one,
    completion,
    dispatch_in,
    send,
)
from tests.integration.test_dispatcher_leases import wait_for
from tests.integration.test_fencing import lock_waiters
from tests.support import backends
from tests.support.harness import serial_plan


def outbox_row(store: StoreUnderTest, saga: str, *columns: str) -> tuple[Any, ...]:
    mark = "?" if store.sqlite else "%s"
    [row] = store.execute(
        f"SELECT {', '.join(columns)} FROM effectus_saga_outbox WHERE saga_id = {mark}", (saga,)
    )
    return row


async def test_a_dispatch_shows_the_grants_of_its_latest_sent_attempt(
    store: StoreUnderTest,
) -> None:
    plain = store.submit(serial_plan("p", ["pay_alo"]), "plain")
    fenced = store.submit(serial_plan("f", ["fenced"]), "fenced")
    daemon = await store.dispatch_store()
    claims = {c.saga_id: c for c in await daemon.claim({"dest": 10})}
    assert dispatch_in(store.view(plain), "s1")["grants"] is None  # nothing sent yet
    assert dispatch_in(store.view(fenced), "s1")["grants"] is None

    sent = {saga: await send(daemon, claim) for saga, claim in claims.items()}
    ahead = sent[fenced]
    assert dispatch_in(store.view(plain), "s1")["grants"] == []
    first = dispatch_in(store.view(fenced), "s1")
    [(_, token)] = ahead.grants
    assert (
        first["grants"] == first["attempts"][0]["grants"] == [{"resource": "res:1", "token": token}]
    )

    # attempt 2 is sent with a larger token, and the dispatch shows that one
    await daemon.record([completion(claims[fenced], OutcomeClass.RETRYABLE)])
    store.make_due()
    second = await claim_one(daemon)
    [(_, larger)] = (await send(daemon, second)).grants
    assert larger > token
    dispatch = dispatch_in(store.view(fenced), "s1")
    assert dispatch["grants"] == dispatch["attempts"][1]["grants"]
    assert dispatch["grants"] == [{"resource": "res:1", "token": larger}]
    # and attempt 3, claimed but not sent, changes nothing of that
    await daemon.record([completion(second, OutcomeClass.RETRYABLE)])
    store.make_due()
    await claim_one(daemon)
    assert dispatch_in(store.view(fenced), "s1")["grants"] == [
        {"resource": "res:1", "token": larger}
    ]


async def test_a_write_ahead_that_goes_through_ends_the_fence_wait(store: StoreUnderTest) -> None:
    holder = store.submit(serial_plan("f", ["fenced"]), "x-1")  # both fence "res:1"
    waiter = store.submit(serial_plan("f", ["fenced"]), "x-2")
    daemon = await store.dispatch_store()
    first, second = sorted(await daemon.claim({"dest": 10}), key=lambda c: c.dispatch_id)
    assert first.saga_id == holder
    await send(daemon, first)
    await daemon.record((await daemon.write_ahead([second]))[1])  # res:1 is busy: a wait
    assert outbox_row(store, waiter, "fence_wait_since")[0] is not None

    await daemon.record([completion(first, OutcomeClass.SUCCESS)])  # gives res:1 back
    store.make_due()
    claim = await claim_one(daemon)
    await send(daemon, claim)
    assert outbox_row(store, waiter, "fence_wait_since", "fence_waits") == (None, 1)


async def test_an_unfenced_write_ahead_still_ends_a_fence_wait(store: StoreUnderTest) -> None:
    # a dispatch that waited while its verb fenced, and no longer fences (an adopted contract)
    saga = store.submit(serial_plan("p", ["pay_alo"]), "x")
    daemon = await store.dispatch_store()
    claim = await claim_one(daemon)
    mark = "?" if store.sqlite else "%s"
    store.execute(
        f"UPDATE effectus_saga_outbox SET fence_wait_since = {store.now_sql()}"
        f" WHERE saga_id = {mark}",
        (saga,),
    )
    await send(daemon, claim)
    assert outbox_row(store, saga, "fence_wait_since")[0] is None


# -- PostgreSQL: the lock instead of a new row version ---------------------------------------


@pytest.fixture
async def pg(db: str) -> AsyncIterator[StoreUnderTest]:
    under_test = StoreUnderTest("postgres", db)
    try:
        yield under_test
    finally:
        await under_test.close()


def row_version(store: StoreUnderTest, saga: str) -> tuple[Any, ...]:
    return outbox_row(store, saga, "xmin::text", "ctid::text", "updated_at", "grants")


@pytest.mark.postgres
async def test_an_unfenced_write_ahead_writes_no_new_version_of_the_outbox_row(
    pg: StoreUnderTest,
) -> None:
    saga = pg.submit(serial_plan("p", ["pay_alo"]), "x")
    daemon = await pg.dispatch_store()
    claim = await claim_one(daemon)
    claimed = row_version(pg, saga)

    await send(daemon, claim)
    assert row_version(pg, saga) == claimed  # same version: nothing on it changed
    [attempt] = dispatch_in(pg.view(saga), "s1")["attempts"]
    assert attempt["sent_at"] is not None and attempt["grants"] == []


@pytest.mark.postgres
async def test_a_fenced_write_ahead_stores_its_grants_on_the_outbox_row(
    pg: StoreUnderTest,
) -> None:
    saga = pg.submit(serial_plan("f", ["fenced"]), "x")
    daemon = await pg.dispatch_store()
    claim = await claim_one(daemon)
    claimed = row_version(pg, saga)

    [(_, token)] = (await send(daemon, claim)).grants
    written = row_version(pg, saga)
    assert written[0] != claimed[0] and written[3] == [{"resource": "res:1", "token": token}]


@pytest.mark.postgres
async def test_an_open_write_ahead_holds_off_every_writer_of_its_rows(
    pg: StoreUnderTest,
) -> None:
    saga = pg.submit(serial_plan("p", ["pay_alo"]), "x")
    daemon = await pg.dispatch_store()
    claim = await claim_one(daemon)
    lock = f"SELECT 1 FROM effectus_saga_outbox WHERE dispatch_id = {claim.dispatch_id}"
    with psycopg.connect(pg.url) as writing:  # the write-ahead's transaction, left open
        writing.execute("SELECT 1")  # opens it: the write-ahead runs in it as a savepoint
        [ready] = backends.run(writing, daemon._write_ahead([claim]))[0]
        assert ready.claim == claim
        with psycopg.connect(pg.url) as other:
            other.execute("SET lock_timeout = '50ms'")
            for statement in (
                f"{lock} FOR UPDATE",  # the recorder, the reclaim, the operator, the claim
                f"{lock} FOR NO KEY UPDATE",
                "UPDATE effectus_saga_outbox SET state = 'retry_wait', lease_owner = NULL,"
                " lease_token = NULL, lease_expires_at = NULL"
                f" WHERE dispatch_id = {claim.dispatch_id}",
            ):
                with pytest.raises(psycopg.errors.LockNotAvailable):
                    other.execute(statement)
                other.rollback()
                other.execute("SET lock_timeout = '50ms'")
            other.execute(f"{lock} FOR KEY SHARE")  # a foreign key check is no writer
            other.rollback()
        writing.commit()
    # the reclaim, once it may lock the row, finds it sent: uncertain, never "not sent"
    pg.expire_leases()
    report = await (await pg.dispatch_store(owner="reclaimer")).reclaim_expired()
    assert report.applied == 1
    [attempt] = dispatch_in(pg.view(saga), "s1")["attempts"]
    assert attempt["outcome"] == "unknown_outcome" and attempt["sent_at"] is not None


@pytest.mark.postgres
async def test_a_write_ahead_waiting_on_a_settlement_marks_nothing(pg: StoreUnderTest) -> None:
    saga = pg.submit(serial_plan("p", ["pay_alo"]), "x")
    daemon = await pg.dispatch_store()
    claim = await claim_one(daemon)
    results: list[object] = []

    def write_ahead() -> None:
        try:
            with backends.connection(pg.url) as conn:
                results.append(backends.run(conn, daemon._write_ahead([claim])))
        except BaseException as exc:  # noqa: BLE001 - asserted below
            results.append(exc)

    # another settles the row (lock, then write) while the write-ahead is on its way: the
    # write-ahead waits for that commit and re-checks its guard on the row as it was left
    with psycopg.connect(pg.url) as settling:
        settling.execute(
            "SELECT 1 FROM effectus_saga_outbox WHERE dispatch_id = %s FOR UPDATE",
            (claim.dispatch_id,),
        )
        settling.execute(
            "UPDATE effectus_saga_outbox SET state = 'retry_wait', lease_owner = NULL,"
            " lease_token = NULL, lease_expires_at = NULL WHERE dispatch_id = %s",
            (claim.dispatch_id,),
        )
        thread = threading.Thread(target=write_ahead)
        thread.start()
        await wait_for(lambda: lock_waiters(pg.url) == 1)
        settling.commit()
    await asyncio.to_thread(thread.join, 30)
    assert results == [([], [])]
    [attempt] = dispatch_in(pg.view(saga), "s1")["attempts"]
    assert attempt["sent_at"] is None and attempt["grants"] is None

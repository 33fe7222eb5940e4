"""``Client.wait`` outlives its LISTEN connection: the server ends it (a restart, a failover),
the wait listens again and still returns the saga's end."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from effectusd import AsyncClient
from effectusd.core.states import SagaState
from tests.support.destination import ok, running
from tests.support.harness import client_for, daemon_running, make_config, serial_plan

pytestmark = pytest.mark.postgres

LISTENERS = (
    "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
    " AND query LIKE '%%LISTEN effectus_saga%%' AND pid <> pg_backend_pid()"
)


def listeners(url: str) -> set[int]:
    with psycopg.connect(url, autocommit=True) as conn:
        return {row[0] for row in conn.execute(LISTENERS)}


async def until(probe, what: str) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(20):  # a bound, not a timing assertion
        while not probe():
            await asyncio.sleep(0.02)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["Client", "AsyncClient"])
async def test_a_wait_whose_listen_connection_is_killed_listens_again_and_returns_the_end(
    db: str, asynchronous: bool
) -> None:
    with running(ok) as dest:
        config = make_config(dest.base_url, {"do": {}})
        client = client_for(config, db)
        saga = client.submit(serial_plan("wait", ["do"]), execution_id="w-1").saga_id
        # A listener another test left on this worker's database may still be closing.
        before = listeners(db)
        if asynchronous:
            waiting = asyncio.create_task(AsyncClient(config, database_url=db).wait(saga, 60.0))
        else:
            waiting = asyncio.create_task(asyncio.to_thread(client.wait, saga, 60.0))
        await until(lambda: listeners(db) - before, "the wait listening")
        [first] = listeners(db) - before
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (first,))
        await until(lambda: listeners(db) - before - {first}, "the wait listening again")
        async with daemon_running(config, db):
            view = await asyncio.wait_for(waiting, 30)

    assert view.state is SagaState.COMPLETED

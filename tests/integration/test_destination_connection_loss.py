"""The kit after its database connections died (a PostgreSQL restart): a request on a dead
connection answers 503 retryable_failure_known_not_committed when nothing can have begun,
never 500; ``effectus_app``'s pool tests a connection before handing it out, so the request
simply succeeds. Backends are ended with pg_terminate_backend(pid, timeout), which returns
once they are gone, so no request can still reach one."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool
from starlette.applications import Starlette
from starlette.routing import Route

from effectusd.core.states import OutcomeClass
from effectusd.destination import EffectusRequest, handle, handle_sync, install_sync
from effectusd.destination.asgi import effectus_app, effectus_endpoint
from tests.conftest import create_database, drop_database
from tests.integration.test_destination_kit import invocation, post, request_of, serving

pytestmark = pytest.mark.postgres

NOT_COMMITTED = OutcomeClass.RETRYABLE.value
TABLE = "CREATE TABLE IF NOT EXISTS loss_effects (idempotency_key text NOT NULL)"


@pytest.fixture
def kit_db() -> Iterator[str]:
    url = create_database("effectusd_kit_loss")
    with psycopg.connect(url, autocommit=True) as conn:
        install_sync(conn)
        conn.execute(TABLE)
    yield url
    drop_database(url)


async def record(conn: psycopg.AsyncConnection[Any], request: EffectusRequest) -> Any:
    await conn.execute("INSERT INTO loss_effects VALUES (%s)", (request.idempotency_key,))
    return {"ok": True}


def terminate_others(url: str) -> int:
    """End every other session on the database (as a restart would); returns how many."""
    with psycopg.connect(url, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    assert all(ended for (ended,) in rows), rows
    return len(rows)


def counts(url: str) -> tuple[int, int]:
    with psycopg.connect(url) as conn:
        [(keys,)] = conn.execute("SELECT count(*) FROM effectus_dest_keys").fetchall()
        [(effects,)] = conn.execute("SELECT count(*) FROM loss_effects").fetchall()
    return keys, effects


@contextlib.asynccontextmanager
async def unchecked_pool(url: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    """A service's own pool, created without a connection check."""
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(url, min_size=1, max_size=1, open=False)
    await pool.open(wait=True)
    try:
        yield pool
    finally:
        await pool.close()


async def test_effectus_app_checks_pooled_connections_so_a_restart_costs_no_failure(
    kit_db: str,
) -> None:
    app = effectus_app(kit_db, {"/ok": record}, min_size=2, max_size=2)
    async with serving(app) as base_url:
        assert (await post(base_url, invocation("before", path="/ok"))).status_code == 200
        assert terminate_others(kit_db) >= 1
        response = await post(base_url, invocation("after", path="/ok"))
        assert response.status_code == 200, response.text
        assert counts(kit_db) == (2, 2)


async def test_a_dead_pooled_connection_answers_503_known_not_committed_never_500(
    kit_db: str,
) -> None:
    async with unchecked_pool(kit_db) as pool:
        app = Starlette(routes=[Route("/ok", effectus_endpoint(pool, record), methods=["POST"])])
        async with serving(app) as base_url:
            assert (await post(base_url, invocation("before", path="/ok"))).status_code == 200
            assert terminate_others(kit_db) >= 1
            response = await post(base_url, invocation("after", path="/ok"))
            assert response.status_code == 503, response.text
            assert response.headers["x-effectus-outcome"] == NOT_COMMITTED
            assert "before the transaction began" in response.json()["error"]
            assert counts(kit_db) == (1, 1)
            # The pool threw the broken connection away: the dispatcher's retry just works.
            assert (await post(base_url, invocation("after", path="/ok"))).status_code == 200
            assert counts(kit_db) == (2, 2)


async def test_handle_on_a_connection_whose_server_went_away_answers_503(kit_db: str) -> None:
    async with await psycopg.AsyncConnection.connect(kit_db) as conn:
        terminate_others(kit_db)
        reply = await handle(conn, request_of(invocation("gone")), record)
    assert (reply.status, reply.outcome) == (503, OutcomeClass.RETRYABLE)
    assert counts(kit_db) == (0, 0)


async def test_handle_on_a_closed_connection_answers_503(kit_db: str) -> None:
    conn = await psycopg.AsyncConnection.connect(kit_db)
    await conn.close()
    reply = await handle(conn, request_of(invocation("closed")), record)
    assert (reply.status, reply.outcome) == (503, OutcomeClass.RETRYABLE)


def test_handle_sync_on_a_connection_whose_server_went_away_answers_503(kit_db: str) -> None:
    def write(conn: psycopg.Connection[Any], request: EffectusRequest) -> Any:
        conn.execute("INSERT INTO loss_effects VALUES (%s)", (request.idempotency_key,))
        return {}

    with psycopg.connect(kit_db) as conn:
        terminate_others(kit_db)
        reply = handle_sync(conn, request_of(invocation("gone")), write)
    assert (reply.status, reply.outcome) == (503, OutcomeClass.RETRYABLE)
    assert counts(kit_db) == (0, 0)


async def test_a_connection_lost_after_begin_stays_unknown(kit_db: str) -> None:
    """Only a failure before or at BEGIN is known not committed; later ones propagate (the
    server answers 500 without an outcome header: unknown)."""

    async def lose_connection(conn: psycopg.AsyncConnection[Any], request: EffectusRequest) -> Any:
        await record(conn, request)
        terminate_others(kit_db)  # this connection's own backend, mid-transaction
        return {}

    async with await psycopg.AsyncConnection.connect(kit_db) as conn:
        with pytest.raises(psycopg.OperationalError):
            await handle(conn, request_of(invocation("mid")), lose_connection)
    assert counts(kit_db) == (0, 0)

"""The destination kit against a real PostgreSQL and a real SQLite file, through real HTTP
servers on 127.0.0.1.

Kit endpoints are served by uvicorn inside the test's own event loop, on a socket bound and
listening before serving starts (so nothing waits for readiness), which lets a mutation block
on an asyncio.Event the test controls. Every contract rule is checked on both backends (the
``kit`` and ``shop`` fixtures are parametrised); tests of PostgreSQL's own behaviour (a key held
by an open transaction, serialization failures, the advisory-locked install) are marked
``postgres``, and SQLite's own (the write lock, busy timeouts) are in
test_destination_sqlite.py. End-to-end tests put effectusd's HttpxExecutor in front of
contrib/kit_shop_service.py; the one-command tests start the contrib services as processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import socket
import sqlite3
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import pytest_asyncio
import uvicorn
from psycopg_pool import AsyncConnectionPool
from starlette.applications import Starlette
from starlette.routing import Route

from contrib.kit_shop_service import BUSINESS_TABLES, SCHEMA, SQLITE_SCHEMA
from contrib.kit_shop_service import build_app as build_shop
from effectusd.config import DestinationConfig
from effectusd.core.canonical import canonical_bytes, parse_json, sha256_hex
from effectusd.core.states import Direction, FencingStatus, OutcomeClass
from effectusd.core.wire import encode_request_headers
from effectusd.destination import (
    EffectusRequest,
    PermanentFailure,
    RetryableFailure,
    SchemaError,
    SqlitePool,
    connect_sqlite,
    handle,
    handle_sync,
    install,
    install_sqlite,
    install_sync,
    parse_request,
    prune_ledger,
    write_transaction,
)
from effectusd.destination.asgi import effectus_endpoint
from effectusd.executors.httpx_executor import HttpxExecutor
from effectusd.executors.protocol import FencingGrant, Invocation
from tests.conftest import create_database, drop_database
from tests.support.services import serving as process_serving

postgres = pytest.mark.postgres
BACKENDS = [pytest.param("postgresql", marks=postgres), "sqlite"]

ROOT = Path(__file__).resolve().parents[2]
KIT_TABLES = ("effectus_dest_keys", "effectus_dest_watermarks")
TEST_TABLES = (
    """CREATE TABLE kit_test_effects (
        id bigserial PRIMARY KEY, idempotency_key text NOT NULL, attempt integer NOT NULL)""",
    "CREATE TABLE kit_test_counter (n integer NOT NULL)",
)
SQLITE_TEST_TABLES = (  # INTEGER PRIMARY KEY restarts at 1 once the table is emptied
    """CREATE TABLE kit_test_effects (
        id INTEGER PRIMARY KEY, idempotency_key TEXT NOT NULL, attempt INTEGER NOT NULL)""",
    "CREATE TABLE kit_test_counter (n INTEGER NOT NULL)",
)


# --- requests as the executor builds them ---------------------------------------------------


def invocation(
    key: str = "k1",
    *,
    args: Any = None,
    attempt: int = 1,
    grants: tuple[FencingGrant, ...] = (),
    path: str = "/ok",
    deadline: datetime | None = None,
    issued_at: datetime | None = None,
) -> Invocation:
    body = canonical_bytes({"order": "o-1", "amount": 1250} if args is None else args)
    return Invocation(
        request_id=f"req-{key}-{attempt}",
        execution_id="order-7",
        saga_id=sha256_hex(b"saga"),
        effect_id="charge",
        attempt=attempt,
        direction=Direction.FORWARD,
        verb="payments.charge",
        method="POST",
        path=path,
        body=body,
        argument_hash=sha256_hex(body),
        contract_hash=sha256_hex(b"contract"),
        idempotency_key=sha256_hex(key.encode()),
        fencing_grants=grants,
        deadline=datetime.now(UTC) + timedelta(minutes=5) if deadline is None else deadline,
        key_issued_at=datetime.now(UTC) if issued_at is None else issued_at,
        timeout=10.0,
        dispatch_id=1,
        lease_token="lease-1",
        fencing_sent=FencingStatus.PROPAGATED if grants else FencingStatus.NOT_REQUESTED,
    )


def request_of(inv: Invocation) -> EffectusRequest:
    return parse_request(encode_request_headers(inv), inv.body)


def wire_headers(inv: Invocation, **drop: bool) -> list[tuple[bytes, bytes]]:
    return [
        (name.encode(), value.encode("utf-8"))
        for name, value in encode_request_headers(inv).items()
        if name not in drop
    ]


async def post(base_url: str, inv: Invocation, headers: Any = None) -> httpx.Response:
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as client:
        return await client.post(inv.path, content=inv.body, headers=headers or wire_headers(inv))


def wire(response: httpx.Response) -> tuple[int, bytes, list[tuple[str, str]]]:
    """Status, body and headers as the client saw them; only Date may differ on a replay."""
    headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() != "date"]
    return response.status_code, response.content, headers


def without_echo(seen: tuple[int, bytes, list[tuple[str, str]]]) -> Any:
    status, body, headers = seen
    return status, body, [(k, v) for k, v in headers if k.lower() != "x-effectus-request-id"]


# --- a real server in this event loop -------------------------------------------------------


@contextlib.asynccontextmanager
async def serving(app: Starlette) -> AsyncIterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections queue here until uvicorn (and the app's lifespan) is up
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        await task
        sock.close()


@dataclasses.dataclass
class Control:
    """What the test mutations do; reset before every test."""

    entered: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    release: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    retryable_left: int = 0
    runs: int = 0


@dataclasses.dataclass
class Kit:
    """A kit server on one backend; ``query`` reads its database (portable SQL only)."""

    backend: str
    base_url: str
    control: Control
    query: Callable[[str], Awaitable[list[tuple[Any, ...]]]]
    reset: Callable[[], Awaitable[None]]

    async def rows(self, query: str) -> list[tuple[Any, ...]]:
        return await self.query(query)

    async def count(self, table: str) -> int:
        [(n,)] = await self.rows(f"SELECT count(*) FROM {table}")
        return int(n)

    async def watermarks(self) -> dict[str, int]:
        return dict(await self.rows("SELECT resource, token FROM effectus_dest_watermarks"))


def mutations_for(control: Control) -> dict[str, Any]:
    async def record(conn: psycopg.AsyncConnection[Any], request: EffectusRequest) -> Any:
        control.runs += 1
        cur = await conn.execute(
            "INSERT INTO kit_test_effects (idempotency_key, attempt) VALUES (%s, %s) RETURNING id",
            (request.idempotency_key, request.attempt),
        )
        row = await cur.fetchone()
        assert row is not None
        return {"row": row[0], "attempt": request.attempt}

    async def ok(conn: psycopg.AsyncConnection[Any], request: EffectusRequest) -> Any:
        return await record(conn, request)

    async def decline(conn: psycopg.AsyncConnection[Any], request: EffectusRequest) -> Any:
        await record(conn, request)  # rolled back with the refusal
        raise PermanentFailure("declined", status=402)

    async def flaky(conn: psycopg.AsyncConnection[Any], request: EffectusRequest) -> Any:
        result = await record(conn, request)
        if control.retryable_left > 0:
            control.retryable_left -= 1
            raise RetryableFailure("ledger of record unavailable", retry_after=1)
        return result

    async def boom(conn: psycopg.AsyncConnection[Any], request: EffectusRequest) -> Any:
        await record(conn, request)
        raise RuntimeError("bug in the mutation")

    async def hold(conn: psycopg.AsyncConnection[Any], request: EffectusRequest) -> Any:
        result = await record(conn, request)
        control.entered.set()
        await control.release.wait()
        return result

    return {"/ok": ok, "/decline": decline, "/flaky": flaky, "/boom": boom, "/hold": hold}


def sqlite_mutations_for(control: Control) -> dict[str, Any]:
    """The same mutations for SQLite: plain functions, run by the kit in a worker thread."""

    def record(conn: sqlite3.Connection, request: EffectusRequest) -> Any:
        control.runs += 1
        [(row,)] = conn.execute(
            "INSERT INTO kit_test_effects (idempotency_key, attempt) VALUES (?, ?) RETURNING id",
            (request.idempotency_key, request.attempt),
        ).fetchall()
        return {"row": row, "attempt": request.attempt}

    def ok(conn: sqlite3.Connection, request: EffectusRequest) -> Any:
        return record(conn, request)

    def decline(conn: sqlite3.Connection, request: EffectusRequest) -> Any:
        record(conn, request)  # rolled back with the refusal
        raise PermanentFailure("declined", status=402)

    def flaky(conn: sqlite3.Connection, request: EffectusRequest) -> Any:
        result = record(conn, request)
        if control.retryable_left > 0:
            control.retryable_left -= 1
            raise RetryableFailure("ledger of record unavailable", retry_after=1)
        return result

    def boom(conn: sqlite3.Connection, request: EffectusRequest) -> Any:
        record(conn, request)
        raise RuntimeError("bug in the mutation")

    return {"/ok": ok, "/decline": decline, "/flaky": flaky, "/boom": boom}


@pytest.fixture(scope="module")
def kit_db() -> Iterator[str]:
    url = create_database("effectusd_kit")
    with psycopg.connect(url, autocommit=True) as conn:
        install_sync(conn)
        for statement in (*TEST_TABLES, *SCHEMA):  # the shop's tables too, emptied per test
            conn.execute(statement)
    yield url
    drop_database(url)


@pytest.fixture(scope="module")
def sqlite_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A SQLite file with the kit's tables, the test tables and the shop's; its URL."""
    path = tmp_path_factory.mktemp("kit") / "kit.db"
    url = f"sqlite:///{path}"  # path is absolute: four slashes in all
    conn = connect_sqlite(url)
    try:
        install_sqlite(conn)
        for statement in (*SQLITE_TEST_TABLES, *SQLITE_SCHEMA):
            conn.execute(statement)
    finally:
        conn.close()
    return url


def routes_for(endpoints: dict[str, Any]) -> Starlette:
    return Starlette(
        routes=[Route(path, endpoint, methods=["POST"]) for path, endpoint in endpoints.items()]
    )


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def postgresql_server(kit_db: str) -> AsyncIterator[Kit]:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(kit_db, max_size=8, open=False)
    await pool.open(wait=True)
    control = Control()
    endpoints = {
        path: effectus_endpoint(pool, mutation) for path, mutation in mutations_for(control).items()
    }
    endpoints["/tiny"] = effectus_endpoint(pool, mutations_for(control)["/ok"], max_body_bytes=16)

    async def query(text: str) -> list[tuple[Any, ...]]:
        async with pool.connection() as conn:
            rows: list[tuple[Any, ...]] = await (await conn.execute(text)).fetchall()
            return rows

    async def reset() -> None:
        tables = ", ".join([*KIT_TABLES, "kit_test_effects", *BUSINESS_TABLES])
        async with pool.connection() as conn:
            await conn.execute(f"TRUNCATE {tables} RESTART IDENTITY")
            await conn.execute("DELETE FROM kit_test_counter")
            await conn.execute("INSERT INTO kit_test_counter VALUES (0)")

    async with serving(routes_for(endpoints)) as base_url:
        yield Kit("postgresql", base_url, control, query, reset)
    await pool.close()


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def sqlite_server(sqlite_db: str) -> AsyncIterator[Kit]:
    control = Control()
    async with SqlitePool(sqlite_db, size=4) as pool:
        endpoints = {
            path: effectus_endpoint(pool, mutation)
            for path, mutation in sqlite_mutations_for(control).items()
        }
        endpoints["/tiny"] = effectus_endpoint(
            pool, sqlite_mutations_for(control)["/ok"], max_body_bytes=16
        )

        async def query(text: str) -> list[tuple[Any, ...]]:
            return await pool.run(lambda conn: conn.execute(text).fetchall())

        def empty(conn: sqlite3.Connection) -> None:
            with write_transaction(conn):
                for table in (*KIT_TABLES, "kit_test_effects", *BUSINESS_TABLES):
                    conn.execute(f"DELETE FROM {table}")
                conn.execute("DELETE FROM kit_test_counter")
                conn.execute("INSERT INTO kit_test_counter VALUES (0)")

        async def reset() -> None:
            await pool.run(empty)

        async with serving(routes_for(endpoints)) as base_url:
            yield Kit("sqlite", base_url, control, query, reset)


@pytest.fixture(params=BACKENDS)
def kit_server(request: pytest.FixtureRequest) -> Kit:
    # Looked up by name, so a SQLite-only run never starts (or needs) PostgreSQL. A plain
    # fixture: async ones cannot look up other async fixtures from inside the running loop.
    server: Kit = request.getfixturevalue(f"{request.param}_server")
    return server


async def emptied(server: Kit) -> Kit:
    await server.reset()
    control = server.control
    control.entered, control.release = asyncio.Event(), asyncio.Event()
    control.retryable_left = control.runs = 0
    return server


@pytest_asyncio.fixture(loop_scope="session")
async def kit(kit_server: Kit) -> Kit:
    return await emptied(kit_server)


@pytest_asyncio.fixture(loop_scope="session")
async def pg_kit(postgresql_server: Kit) -> Kit:
    """The PostgreSQL kit alone, for tests of PostgreSQL's own behaviour."""
    return await emptied(postgresql_server)


# --- replay and argument-hash conflicts -----------------------------------------------------


async def test_first_request_commits_business_row_and_ledger_row_together(kit: Kit) -> None:
    response = await post(kit.base_url, invocation())
    assert response.status_code == 200
    assert response.json() == {"row": 1, "attempt": 1}
    assert "x-effectus-outcome" not in response.headers
    assert await kit.rows("SELECT state, status_code, attempt FROM effectus_dest_keys") == [
        ("completed", 200, 1)
    ]
    assert await kit.count("kit_test_effects") == 1


async def test_replay_of_a_completed_key_is_identical_and_does_not_run_the_mutation(
    kit: Kit,
) -> None:
    grants = (FencingGrant("account:a", 3),)
    first = await post(kit.base_url, invocation(grants=grants))
    again = await post(kit.base_url, invocation(attempt=2, grants=(FencingGrant("account:a", 4),)))
    # Identical but for the request-ID echo, which names the request each answer is for.
    assert first.headers["x-effectus-request-id"] == "req-k1-1"
    assert again.headers["x-effectus-request-id"] == "req-k1-2"
    assert without_echo(wire(again)) == without_echo(wire(first))
    assert again.json() == {"row": 1, "attempt": 1}  # the original answer, not attempt 2's
    assert kit.control.runs == 1
    assert await kit.count("kit_test_effects") == 1


async def test_same_key_with_other_arguments_is_refused_422_permanent_without_mutation(
    kit: Kit,
) -> None:
    await post(kit.base_url, invocation())
    other = await post(kit.base_url, invocation(attempt=2, args={"order": "o-1", "amount": 9}))
    assert other.status_code == 422
    assert other.headers["x-effectus-outcome"] == "permanent_failure"
    assert "x-effectus-fencing" not in other.headers
    assert kit.control.runs == 1
    assert await kit.count("kit_test_effects") == 1


# --- a key still in progress ----------------------------------------------------------------


@postgres
async def test_a_key_held_by_an_open_transaction_answers_409_unknown_at_once(pg_kit: Kit) -> None:
    # SQLite cannot get here: its second writer waits for the lock (test_destination_sqlite.py).
    kit = pg_kit
    first = asyncio.create_task(post(kit.base_url, invocation(path="/hold")))
    await kit.control.entered.wait()  # transaction 1 holds the key, its mutation is blocked
    second = await post(kit.base_url, invocation(attempt=2, path="/hold"))
    assert second.status_code == 409
    assert second.headers["x-effectus-outcome"] == "unknown_outcome"
    kit.control.release.set()
    assert (await first).status_code == 200
    third = await post(kit.base_url, invocation(attempt=3, path="/hold"))
    assert without_echo(wire(third)) == without_echo(wire(await first))
    assert kit.control.runs == 1
    assert await kit.count("kit_test_effects") == 1


# --- fencing --------------------------------------------------------------------------------


async def test_token_below_the_watermark_is_refused_409_stale_fence_without_mutation(
    kit: Kit,
) -> None:
    assert (await post(kit.base_url, invocation("a", grants=(FencingGrant("r", 10),)))).is_success
    stale = await post(kit.base_url, invocation("b", grants=(FencingGrant("r", 9),)))
    assert stale.status_code == 409
    assert stale.headers["x-effectus-outcome"] == "stale_fence"
    assert kit.control.runs == 1
    assert await kit.count("effectus_dest_keys") == 1  # no ledger row: a later retry may run
    assert await kit.watermarks() == {"r": 10}


async def test_higher_or_equal_token_is_accepted_and_raises_the_watermark(kit: Kit) -> None:
    for key, token in (("a", 5), ("b", 8), ("c", 8)):
        response = await post(kit.base_url, invocation(key, grants=(FencingGrant("r", token),)))
        assert response.status_code == 200, key
    assert await kit.watermarks() == {"r": 8}
    assert kit.control.runs == 3


async def test_a_stale_grant_rolls_back_watermarks_raised_for_the_other_grants(kit: Kit) -> None:
    both = (FencingGrant("a", 5), FencingGrant("b", 5))
    await post(kit.base_url, invocation("first", grants=both))
    stale = await post(
        kit.base_url, invocation("second", grants=(FencingGrant("a", 9), FencingGrant("b", 4)))
    )
    assert stale.headers["x-effectus-outcome"] == "stale_fence"
    assert await kit.watermarks() == {"a": 5, "b": 5}


async def test_fencing_acknowledged_is_answered_iff_the_request_carried_grants(kit: Kit) -> None:
    with_grants = await post(kit.base_url, invocation("g", grants=(FencingGrant("r", 1),)))
    without = await post(kit.base_url, invocation("n"))
    replayed = await post(kit.base_url, invocation("g", attempt=2, grants=(FencingGrant("r", 2),)))
    declined = await post(
        kit.base_url, invocation("d", path="/decline", grants=(FencingGrant("r", 3),))
    )
    assert with_grants.headers["x-effectus-fencing"] == "acknowledged"
    assert "x-effectus-fencing" not in without.headers
    assert replayed.headers["x-effectus-fencing"] == "acknowledged"
    assert declined.headers["x-effectus-fencing"] == "acknowledged"


async def test_non_ascii_fencing_resource_round_trips_through_http(kit: Kit) -> None:
    grants = (FencingGrant("account:müller", 4),)
    assert (await post(kit.base_url, invocation(grants=grants))).status_code == 200
    assert await kit.watermarks() == {"account:müller": 4}


# --- failures of the mutation ---------------------------------------------------------------


async def test_permanent_failure_is_stored_replayed_and_keeps_no_business_writes(
    kit: Kit,
) -> None:
    first = await post(kit.base_url, invocation(path="/decline"))
    again = await post(kit.base_url, invocation(attempt=2, path="/decline"))
    assert first.status_code == 402
    assert first.headers["x-effectus-outcome"] == "permanent_failure"
    assert first.json() == {"error": "declined"}
    assert without_echo(wire(again)) == without_echo(wire(first))
    assert kit.control.runs == 1
    assert await kit.count("kit_test_effects") == 0
    assert await kit.rows("SELECT state, status_code, outcome FROM effectus_dest_keys") == [
        ("completed", 402, "permanent_failure")
    ]


async def test_retryable_failure_leaves_nothing_so_a_retry_runs_afresh(kit: Kit) -> None:
    kit.control.retryable_left = 1
    first = await post(kit.base_url, invocation(path="/flaky", grants=(FencingGrant("r", 5),)))
    assert first.status_code == 503
    assert first.headers["x-effectus-outcome"] == "retryable_failure_known_not_committed"
    assert first.headers["retry-after"] == "1"
    assert await kit.count("effectus_dest_keys") == 0
    assert await kit.count("kit_test_effects") == 0
    assert await kit.watermarks() == {}

    retry = await post(
        kit.base_url, invocation(attempt=2, path="/flaky", grants=(FencingGrant("r", 6),))
    )
    assert retry.status_code == 200
    assert retry.json()["attempt"] == 2
    assert kit.control.runs == 2
    assert await kit.count("kit_test_effects") == 1
    assert await kit.watermarks() == {"r": 6}


async def test_an_exception_mid_mutation_rolls_back_the_ledger_row_and_answers_500_unclassified(
    kit: Kit,
) -> None:
    response = await post(kit.base_url, invocation(path="/boom", grants=(FencingGrant("r", 1),)))
    assert response.status_code == 500
    assert "x-effectus-outcome" not in response.headers  # the executor reads it as unknown
    assert await kit.count("effectus_dest_keys") == 0
    assert await kit.count("kit_test_effects") == 0
    assert await kit.watermarks() == {}


@postgres
async def test_a_serialization_failure_answers_503_with_nothing_committed(
    pg_kit: Kit, kit_db: str
) -> None:
    kit = pg_kit

    async def bump(conn: psycopg.AsyncConnection[Any], request: EffectusRequest) -> Any:
        async with await psycopg.AsyncConnection.connect(kit_db, autocommit=True) as other:
            await other.execute("UPDATE kit_test_counter SET n = n + 1")
        # This transaction's snapshot predates that update: REPEATABLE READ must refuse.
        await conn.execute("UPDATE kit_test_counter SET n = n + 1")
        return {}

    async with await psycopg.AsyncConnection.connect(kit_db) as conn:
        await conn.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
        reply = await handle(conn, request_of(invocation()), bump)
    assert (reply.status, reply.outcome) == (503, OutcomeClass.RETRYABLE)
    assert await kit.count("effectus_dest_keys") == 0
    assert await kit.rows("SELECT n FROM kit_test_counter") == [(1,)]


# --- requests that break the protocol -------------------------------------------------------


async def test_a_missing_header_answers_400_permanent_naming_it_and_touches_nothing(
    kit: Kit,
) -> None:
    inv = invocation()
    response = await post(kit.base_url, inv, wire_headers(inv, **{"X-Effectus-Attempt": True}))
    assert response.status_code == 400
    assert response.headers["x-effectus-outcome"] == "permanent_failure"
    assert response.json() == {"error": "X-Effectus-Attempt: missing"}
    assert kit.control.runs == 0
    assert await kit.count("effectus_dest_keys") == 0


async def test_a_body_not_matching_the_argument_hash_is_refused_over_http(kit: Kit) -> None:
    inv = invocation()
    tampered = dataclasses.replace(inv, body=canonical_bytes({"order": "o-1", "amount": 9999}))
    response = await post(kit.base_url, tampered, wire_headers(inv))
    assert response.status_code == 400
    assert response.json()["error"].startswith("X-Effectus-Argument-Hash: ")
    assert b"9999" not in response.content
    assert kit.control.runs == 0


async def test_a_body_over_the_limit_answers_413_permanent(kit: Kit) -> None:
    response = await post(kit.base_url, invocation(path="/tiny"))
    assert response.status_code == 413
    assert response.headers["x-effectus-outcome"] == "permanent_failure"
    assert kit.control.runs == 0


async def test_every_answer_echoes_the_request_id_it_answers(kit: Kit) -> None:
    """Success, replay, conflict, decline, retryable, protocol error and oversize: each names
    the request it answers, so a client can refuse an answer meant for another request."""
    kit.control.retryable_left = 1
    missing = invocation("m")
    cases = [
        (invocation("a"), None, 200),
        (invocation("a", attempt=2), None, 200),  # the replay names the new attempt
        (invocation("a", attempt=3, args={"order": "o-9"}), None, 422),
        (invocation("d", path="/decline"), None, 402),
        (invocation("f", path="/flaky"), None, 503),
        (missing, wire_headers(missing, **{"X-Effectus-Attempt": True}), 400),
        (invocation("t", path="/tiny"), None, 413),
    ]
    for inv, headers, status in cases:
        response = await post(kit.base_url, inv, headers)
        assert response.status_code == status, inv.request_id
        assert response.headers.get_list("x-effectus-request-id") == [inv.request_id]


@postgres
async def test_handle_names_the_request_in_every_reply(kit_db: str) -> None:
    async def ok(conn: psycopg.AsyncConnection[Any], request: EffectusRequest) -> Any:
        return {}

    async with await psycopg.AsyncConnection.connect(kit_db) as conn:
        first = await handle(conn, request_of(invocation("h")), ok)
        replay = await handle(conn, request_of(invocation("h", attempt=2)), ok)
    assert first.headers["X-Effectus-Request-ID"] == "req-h-1"
    assert replay.headers["X-Effectus-Request-ID"] == "req-h-2"


# --- the Python API directly ----------------------------------------------------------------


@postgres
async def test_handle_refuses_a_connection_already_inside_a_transaction(kit_db: str) -> None:
    async with await psycopg.AsyncConnection.connect(kit_db) as conn:
        await conn.execute("SELECT 1")
        with pytest.raises(ValueError, match="owns the transaction"):
            await handle(conn, request_of(invocation()), mutations_for(Control())["/ok"])


@postgres
async def test_handle_sync_replays_refuses_conflicts_and_fences_like_handle(
    pg_kit: Kit, kit_db: str
) -> None:
    kit = pg_kit
    runs: list[int] = []

    def mutation(conn: psycopg.Connection[Any], request: EffectusRequest) -> Any:
        runs.append(request.attempt)
        conn.execute("INSERT INTO kit_test_effects (idempotency_key, attempt) VALUES ('s', 1)")
        return {"attempt": request.attempt}

    with psycopg.connect(kit_db) as conn:
        first = handle_sync(conn, request_of(invocation(grants=(FencingGrant("r", 5),))), mutation)
        again = handle_sync(conn, request_of(invocation(attempt=2)), mutation)
        other = handle_sync(conn, request_of(invocation(args={"x": 1})), mutation)
        stale = handle_sync(
            conn, request_of(invocation("b", grants=(FencingGrant("r", 4),))), mutation
        )
    assert (first.status, first.replayed, parse_json(first.body)) == (200, False, {"attempt": 1})
    assert (again.status, again.replayed, again.body) == (200, True, first.body)
    assert (other.status, other.outcome) == (422, OutcomeClass.PERMANENT)
    assert (stale.status, stale.outcome) == (409, OutcomeClass.STALE_FENCE)
    assert runs == [1]
    assert await kit.count("kit_test_effects") == 1


@postgres
async def test_prune_removes_only_expired_keys_and_a_replay_extends_a_key(
    pg_kit: Kit, kit_db: str
) -> None:
    kit = pg_kit
    mutation = mutations_for(kit.control)["/ok"]
    async with await psycopg.AsyncConnection.connect(kit_db) as conn:
        for key in ("short", "replayed"):
            await handle(
                conn, request_of(invocation(key)), mutation, retention=timedelta(seconds=30)
            )
        await handle(conn, request_of(invocation("long")), mutation)
        replay = await handle(conn, request_of(invocation("replayed", attempt=2)), mutation)
        assert replay.replayed
        pruned = await prune_ledger(conn, before=datetime.now(UTC) + timedelta(hours=1), batch=1)
    assert pruned == 1
    keys = {key for (key,) in await kit.rows("SELECT idempotency_key FROM effectus_dest_keys")}
    assert keys == {sha256_hex(b"long"), sha256_hex(b"replayed")}
    assert await kit.count("kit_test_effects") == 3  # pruning forgets keys, not business rows


@postgres
async def test_install_is_idempotent_and_safe_when_instances_start_together() -> None:
    url = create_database("effectusd_kit_install")
    try:
        async with (
            await psycopg.AsyncConnection.connect(url, autocommit=True) as one,
            await psycopg.AsyncConnection.connect(url, autocommit=True) as two,
        ):
            applied = await asyncio.gather(install(one), install(two))
            assert sorted(applied) == [[], [1, 2]]
            assert await install(one) == []
            await one.execute("UPDATE effectus_dest_migrations SET checksum = 'edited'")
            with pytest.raises(SchemaError, match="changed after it was applied"):
                await install(two)
    finally:
        drop_database(url)


# --- end to end: effectusd's HttpxExecutor against the kit shop ------------------------------


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def postgresql_shop(postgresql_server: Kit, kit_db: str) -> AsyncIterator[str]:
    async with serving(build_shop(kit_db, pool_max_size=4)) as base_url:
        yield base_url


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def sqlite_shop(sqlite_server: Kit, sqlite_db: str) -> AsyncIterator[str]:
    async with serving(build_shop(sqlite_db, pool_max_size=4)) as base_url:
        yield base_url


@contextlib.asynccontextmanager
async def executor_for(base_url: str) -> AsyncIterator[HttpxExecutor]:
    config = DestinationConfig.model_validate({"base_url": base_url, "timeout": "10s"})
    executor = HttpxExecutor("shop", config)
    try:
        yield executor
    finally:
        await executor.aclose()


@pytest.fixture
def shop_url(request: pytest.FixtureRequest, kit_server: Kit) -> str:
    """The kit shop on the same backend (and database) as ``kit``."""
    url: str = request.getfixturevalue(f"{kit_server.backend}_shop")
    return url


@pytest_asyncio.fixture(loop_scope="session")
async def shop(shop_url: str, kit: Kit) -> AsyncIterator[HttpxExecutor]:
    async with executor_for(shop_url) as executor:
        yield executor


@pytest_asyncio.fixture(loop_scope="session")
async def pg_shop(postgresql_shop: str, pg_kit: Kit) -> AsyncIterator[HttpxExecutor]:
    async with executor_for(postgresql_shop) as executor:
        yield executor


def charge(key: str, amount: int = 1250, **changes: Any) -> Invocation:
    args = {"order": f"o-{key}", "account_id": "acct-1", "amount": amount, "currency": "EUR"}
    changes.setdefault("grants", (FencingGrant("account:acct-1", 10),))
    return invocation(key, args=args, path="/payments/charge", **changes)


async def test_executor_gets_success_then_the_same_result_replayed(
    shop: HttpxExecutor, kit: Kit
) -> None:
    first = await shop.call(charge("a"))
    again = await shop.call(charge("a", attempt=2, grants=(FencingGrant("account:acct-1", 11),)))
    assert first.outcome is OutcomeClass.SUCCESS
    assert first.fencing_status is FencingStatus.ACKNOWLEDGED
    assert first.result["charge_id"].startswith("ch-")
    assert again.outcome is OutcomeClass.SUCCESS and again.result == first.result
    assert await kit.count("kit_shop_charges") == 1


async def test_executor_gets_stale_fence_for_a_token_below_the_watermark(
    shop: HttpxExecutor, kit: Kit
) -> None:
    await shop.call(charge("a", grants=(FencingGrant("account:acct-1", 10),)))
    stale = await shop.call(charge("b", grants=(FencingGrant("account:acct-1", 9),)))
    assert (stale.outcome, stale.status_code) == (OutcomeClass.STALE_FENCE, 409)
    assert await kit.count("kit_shop_charges") == 1


async def test_executor_gets_a_permanent_decline_on_every_attempt(
    shop: HttpxExecutor, kit: Kit
) -> None:
    results = [await shop.call(charge("big", amount=20_000, attempt=n)) for n in (1, 2)]
    assert [(r.outcome, r.status_code) for r in results] == [(OutcomeClass.PERMANENT, 402)] * 2
    assert await kit.count("kit_shop_charges") == 0


async def test_executor_gets_permanent_for_a_key_reused_with_other_arguments(
    shop: HttpxExecutor,
) -> None:
    await shop.call(charge("a"))
    reused = await shop.call(charge("a", amount=99, attempt=2))
    assert (reused.outcome, reused.status_code) == (OutcomeClass.PERMANENT, 422)


@postgres
async def test_executor_gets_unknown_while_the_key_is_in_progress_then_the_replay(
    pg_shop: HttpxExecutor, pg_kit: Kit, kit_db: str
) -> None:
    shop, kit, inv = pg_shop, pg_kit, charge("a")

    async def held_charge(conn: psycopg.AsyncConnection[Any], request: EffectusRequest) -> Any:
        await conn.execute(
            "INSERT INTO kit_shop_charges"
            " (charge_id, order_id, account_id, amount, currency, idempotency_key)"
            " VALUES ('ch-held', 'o-a', 'acct-1', 1250, 'EUR', %s)",
            (request.idempotency_key,),
        )
        kit.control.entered.set()
        await kit.control.release.wait()
        return {"charge_id": "ch-held"}

    async with await psycopg.AsyncConnection.connect(kit_db) as conn:
        holder = asyncio.create_task(handle(conn, request_of(inv), held_charge))
        await kit.control.entered.wait()
        busy = await shop.call(dataclasses.replace(inv, attempt=2, request_id="req-a-2"))
        kit.control.release.set()
        held = await holder
    assert (busy.outcome, busy.status_code) == (OutcomeClass.UNKNOWN, 409)
    assert held.status == 200
    replay = await shop.call(dataclasses.replace(inv, attempt=3, request_id="req-a-3"))
    assert replay.outcome is OutcomeClass.SUCCESS
    assert replay.result == {"charge_id": "ch-held"}
    assert await kit.count("kit_shop_charges") == 1


async def probe_key(base_url: str, key: str) -> httpx.Response:
    """``GET /effectus/keys/{key}``, the probe route effectus_app serves (the shop's app)."""
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as client:
        return await client.get(f"/effectus/keys/{key}")


async def test_executor_gets_retryable_past_the_deadline_and_the_probe_finds_nothing(
    shop: HttpxExecutor, shop_url: str, kit: Kit
) -> None:
    late = await shop.call(charge("late", deadline=datetime.now(UTC) - timedelta(hours=1)))
    assert (late.outcome, late.status_code) == (OutcomeClass.RETRYABLE, 503)
    assert await kit.count("kit_shop_charges") == 0
    probed = await probe_key(shop_url, sha256_hex(b"late"))
    assert (probed.status_code, probed.json()["state"]) == (404, "unknown")


async def test_executor_gets_unknown_for_an_absent_key_issued_longer_ago_than_retention(
    shop: HttpxExecutor, kit: Kit
) -> None:
    old = datetime.now(UTC) - timedelta(days=8)  # the kit keeps answers 7 days by default
    refused = await shop.call(charge("old", issued_at=old))
    assert (refused.outcome, refused.status_code) == (OutcomeClass.UNKNOWN, 410)
    assert await kit.count("kit_shop_charges") == 0
    assert await kit.count("effectus_dest_keys") == 0


async def test_the_probe_route_answers_the_stored_answer_or_unknown_over_http(
    shop: HttpxExecutor, shop_url: str, kit: Kit
) -> None:
    charged = await shop.call(charge("a"))
    await shop.call(charge("big", amount=20_000))
    committed = await probe_key(shop_url, sha256_hex(b"a"))
    assert committed.status_code == 200
    assert committed.json() == {
        "key": sha256_hex(b"a"),
        "state": "committed",
        "answer": {
            "status": 200,
            "outcome": None,
            "fencing_acknowledged": True,
            "body": charged.result,
        },
    }
    assert "x-effectus-outcome" not in committed.headers  # a probe is no answer to a call
    declined = await probe_key(shop_url, sha256_hex(b"big"))
    assert (declined.status_code, declined.json()["state"]) == (422, "refused")
    stored = declined.json()["answer"]
    assert (stored["status"], stored["outcome"]) == (402, "permanent_failure")
    never = await probe_key(shop_url, sha256_hex(b"never"))
    assert (never.status_code, never.json()) == (
        404,
        {"key": sha256_hex(b"never"), "state": "unknown"},
    )
    bad = await probe_key(shop_url, "not-a-key")
    assert (bad.status_code, bad.json()) == (
        400,
        {"error": "key: expected 64 lowercase hex digits"},
    )
    assert await kit.count("kit_shop_charges") == 1  # probes run nothing


@postgres
async def test_the_probe_says_in_progress_without_disturbing_the_request_it_sees(
    postgresql_shop: str, pg_kit: Kit, kit_db: str
) -> None:
    kit, inv = pg_kit, charge("a")

    async def held(conn: psycopg.AsyncConnection[Any], request: EffectusRequest) -> Any:
        kit.control.entered.set()
        await kit.control.release.wait()
        return {"charge_id": "ch-held"}

    async with await psycopg.AsyncConnection.connect(kit_db) as conn:
        holder = asyncio.create_task(handle(conn, request_of(inv), held))
        await kit.control.entered.wait()
        during = await probe_key(postgresql_shop, inv.idempotency_key)
        kit.control.release.set()
        answered = await holder
    assert (during.status_code, during.json()["state"]) == (409, "in_progress")
    assert answered.status == 200  # the probe took no lock the request needed
    after = await probe_key(postgresql_shop, inv.idempotency_key)
    assert (after.status_code, after.json()["answer"]["body"]) == (200, {"charge_id": "ch-held"})


async def test_every_shop_endpoint_answers_the_example_shop_shapes(
    shop: HttpxExecutor, kit: Kit
) -> None:
    def step(key: str, path: str, args: dict[str, Any]) -> Invocation:
        return invocation(key, args=args, path=path)

    reserved = await shop.call(
        step("r", "/inventory/reserve", {"order": "o-1", "sku": "book-42", "quantity": 1})
    )
    reservation = reserved.result["reservation_id"]
    charged = await shop.call(charge("c"))
    shipped = await shop.call(
        step("s", "/shipping/schedule", {"order": "o-1", "reservation_id": reservation})
    )
    refunded = await shop.call(
        step(
            "f",
            "/payments/refund",
            {"account_id": "acct-1", "charge_id": charged.result["charge_id"]},
        )
    )
    released = await shop.call(step("l", "/inventory/release", {"reservation_id": reservation}))
    assert reservation.startswith("res-")
    assert shipped.result["tracking"].startswith("trk-")
    assert (refunded.result, released.result) == ({"refunded": True}, {"released": True})
    bad = await shop.call(step("x", "/inventory/reserve", {"order": "o-1", "sku": "b"}))
    assert (bad.outcome, bad.status_code) == (OutcomeClass.PERMANENT, 422)
    assert await kit.rows(
        "SELECT count(*) FROM kit_shop_reservations WHERE released_at IS NOT NULL"
    ) == [(1,)]


# --- the contrib services as one-command processes ------------------------------------------


@contextlib.contextmanager
def started(
    script: str,
    database_url: str | None,
    *,
    cwd: Path = ROOT,
    env: dict[str, str] | None = None,
) -> Iterator[str]:
    """Run ``python contrib/SCRIPT --port 0 [--database-url URL]`` in ``cwd``; yield its base
    URL once it listens."""
    command = [sys.executable, str(ROOT / "contrib" / script), "--port", "0"]
    if database_url is not None:
        command += ["--database-url", database_url]
    with process_serving(command, cwd=cwd, env=env) as base_url:
        yield base_url


def send_twice(base_url: str, key: str) -> list[httpx.Response]:
    """One dispatch delivered twice (a retry after a lost answer): attempts 1 and 2."""
    with httpx.Client(base_url=base_url, timeout=10) as client:
        return [
            client.post(
                inv.path,
                content=inv.body,
                headers=[(n.encode(), v.encode()) for n, v in encode_request_headers(inv).items()],
            )
            for inv in (charge(key, attempt=1), charge(key, attempt=2))
        ]


@postgres
def test_kit_shop_starts_with_one_command_and_acts_once_per_key() -> None:
    url = create_database("effectusd_kit_shop")
    try:
        with started("kit_shop_service.py", url) as base_url:
            first, second = send_twice(base_url, "twice")
        assert first.status_code == second.status_code == 200
        assert first.json() == second.json()
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT count(*) FROM kit_shop_charges").fetchone() == (1,)
    finally:
        drop_database(url)


@postgres
def test_plain_control_starts_with_one_command_and_acts_on_every_duplicate() -> None:
    url = create_database("effectusd_plain")
    try:
        with started("plain_destination.py", url) as base_url:
            first, second = send_twice(base_url, "twice")
        assert first.status_code == second.status_code == 200
        assert first.json() != second.json()  # two charges
        with psycopg.connect(url) as conn:
            rows = conn.execute(
                "SELECT idempotency_key, attempt, path FROM plain_requests ORDER BY id"
            ).fetchall()
        key = hashlib.sha256(b"twice").hexdigest()
        assert rows == [(key, "1", "/payments/charge"), (key, "2", "/payments/charge")]
    finally:
        drop_database(url)

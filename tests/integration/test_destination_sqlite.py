"""The destination kit on SQLite: what is SQLite's own. Real database files in tmp_path, real
threads and processes, real HTTP; the contract rules shared with PostgreSQL run on both
backends in test_destination_kit.py.

SQLite has one writer at a time and the kit runs every exchange in BEGIN IMMEDIATE, so a
second request for a key in progress waits for the lock instead of answering 409, and a lock
held past the busy timeout answers 503 with nothing committed. Where a test must know that a
thread is already waiting for the lock, the connection's trace callback says when it began
its BEGIN (the statement that waits), so no test sleeps to synchronise.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import sqlite3
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from contrib.kit_shop_service import ROUTES, SQLITE_ROUTES
from effectusd.core.canonical import parse_json, sha256_hex
from effectusd.core.states import OutcomeClass
from effectusd.destination import (
    DatabaseURLError,
    EffectusRequest,
    PostgresDatabase,
    SchemaError,
    SqliteDatabase,
    SqlitePool,
    connect_sqlite,
    handle_sqlite,
    install_sqlite,
    parse_database_url,
    prune_ledger_sqlite,
)
from effectusd.destination.asgi import effectus_app, effectus_endpoint
from effectusd.destination.queries import POSTGRES, SQLITE
from effectusd.destination.schema import migrations
from effectusd.executors.protocol import FencingGrant
from tests.integration.test_destination_kit import (
    invocation,
    post,
    request_of,
    routes_for,
    send_twice,
    serving,
    started,
)

EFFECTS = "CREATE TABLE effects (id INTEGER PRIMARY KEY, idempotency_key TEXT NOT NULL) STRICT"


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    """A fresh SQLite file with the kit's tables and an ``effects`` business table."""
    url = f"sqlite:///{tmp_path / 'kit.db'}"
    with connected(url) as conn:
        install_sqlite(conn)
        conn.execute(EFFECTS)
    return url


@pytest.fixture
def conn(db_url: str) -> Iterator[sqlite3.Connection]:
    with connected(db_url) as conn:
        yield conn


@contextlib.contextmanager
def connected(url: str, **options: Any) -> Iterator[sqlite3.Connection]:
    """``connect_sqlite`` that closes on exit (sqlite3's own ``with`` only commits)."""
    conn = connect_sqlite(url, **options)
    try:
        yield conn
    finally:
        conn.close()


def insert_effect(conn: sqlite3.Connection, request: EffectusRequest) -> Any:
    [(row,)] = conn.execute(
        "INSERT INTO effects (idempotency_key) VALUES (?) RETURNING id",
        (request.idempotency_key,),
    ).fetchall()
    return {"row": row, "attempt": request.attempt}


def count(conn: sqlite3.Connection, table: str) -> int:
    [(n,)] = conn.execute(f"SELECT count(*) FROM {table}").fetchall()
    return int(n)


def when_it_begins(conn: sqlite3.Connection) -> threading.Event:
    """Set once ``conn`` starts a BEGIN, i.e. is about to wait for the write lock."""
    begun = threading.Event()

    def trace(statement: str) -> None:
        if statement.startswith("BEGIN"):
            begun.set()

    conn.set_trace_callback(trace)
    return begun


# --- the URL convention ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///shop.db", SqliteDatabase(Path("shop.db"))),
        ("sqlite:///data/shop.db", SqliteDatabase(Path("data/shop.db"))),
        ("sqlite:////var/lib/shop.db", SqliteDatabase(Path("/var/lib/shop.db"))),
        ("postgresql://shop@127.0.0.1/shop", PostgresDatabase("postgresql://shop@127.0.0.1/shop")),
        ("postgres://127.0.0.1/shop", PostgresDatabase("postgres://127.0.0.1/shop")),
        ("host=127.0.0.1 dbname=shop", PostgresDatabase("host=127.0.0.1 dbname=shop")),
    ],
)
def test_database_urls_follow_the_project_convention(url: str, expected: Any) -> None:
    assert parse_database_url(url) == expected


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("", "empty"),
        ("sqlite://shop.db", "needs three slashes"),
        ("sqlite:///", "no file path"),
        ("sqlite:///:memory:", "in-memory database"),
        ("sqlite:///shop.db?mode=ro", "query strings"),
        ("mysql://shop:hunter2@db/shop", "scheme 'mysql'"),
        ("shop.db", "no known scheme"),
    ],
)
def test_a_url_the_kit_cannot_use_is_refused_saying_why_and_never_echoing_it(
    url: str, reason: str
) -> None:
    with pytest.raises(DatabaseURLError, match=reason) as refused:
        parse_database_url(url)
    assert "hunter2" not in str(refused.value)


# --- connections and the schema -------------------------------------------------------------


def test_connect_sqlite_opens_in_wal_with_a_busy_timeout_and_foreign_keys(tmp_path: Path) -> None:
    with connected(f"sqlite:///{tmp_path / 'a.db'}", busy_timeout=2.5) as conn:
        pragmas = {
            name: conn.execute(f"PRAGMA {name}").fetchone()[0]
            for name in ("journal_mode", "busy_timeout", "foreign_keys", "synchronous")
        }
        assert conn.isolation_level is None
    assert pragmas == {
        "journal_mode": "wal",
        "busy_timeout": 2500,
        "foreign_keys": 1,
        "synchronous": 2,
    }


def test_connect_sqlite_names_the_file_it_cannot_open(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-directory" / "shop.db"
    with pytest.raises(sqlite3.OperationalError, match="no-such-directory"):
        connect_sqlite(missing)
    with pytest.raises(ValueError, match="PostgreSQL URL"):
        connect_sqlite("postgresql://127.0.0.1/shop")


def test_both_dialects_ship_the_same_migration_versions() -> None:
    # An upgrade written for one backend only would leave the other's ledger behind.
    assert [m.version for m in migrations("sqlite")] == [m.version for m in migrations()]
    assert migrations("sqlite")[0].checksum != migrations()[0].checksum  # really another file


def test_every_named_statement_exists_in_both_dialects() -> None:
    # The exchange names its steps once; a step missing in one dialect fails only there.
    postgres_only = {"install_lock"}  # SQLite's installers queue on BEGIN IMMEDIATE instead
    assert POSTGRES.names()  # the folder is found: an empty pair of sets would pass
    assert SQLITE.names() == POSTGRES.names() - postgres_only


def test_install_sqlite_is_idempotent_and_safe_when_instances_start_together(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'install.db'}"
    with connected(url) as one, connected(url) as two:
        barrier = threading.Barrier(2, timeout=30)

        def install(conn: sqlite3.Connection) -> list[int]:
            barrier.wait()
            return install_sqlite(conn)

        with ThreadPoolExecutor(2) as pool:
            applied = list(pool.map(install, (one, two)))
        assert sorted(applied) == [[], [1, 2]]
        assert install_sqlite(one) == []
        one.execute("UPDATE effectus_dest_migrations SET checksum = 'edited'")
        with pytest.raises(SchemaError, match="changed after it was applied"):
            install_sqlite(two)


def test_install_sqlite_inside_the_callers_transaction_commits_or_rolls_back_with_it(
    tmp_path: Path,
) -> None:
    with connected(f"sqlite:///{tmp_path / 'savepoint.db'}") as conn:
        conn.execute("BEGIN IMMEDIATE")
        assert install_sqlite(conn) == [1, 2]
        conn.execute("ROLLBACK")
        tables = "SELECT name FROM sqlite_master WHERE name LIKE 'effectus_dest_%'"
        assert conn.execute(tables).fetchall() == []


# --- the ledger, directly -------------------------------------------------------------------


def test_handle_sqlite_replays_refuses_conflicts_and_fences(conn: sqlite3.Connection) -> None:
    runs: list[int] = []

    def mutation(conn: sqlite3.Connection, request: EffectusRequest) -> Any:
        runs.append(request.attempt)
        return insert_effect(conn, request)

    first = handle_sqlite(conn, request_of(invocation(grants=(FencingGrant("r", 5),))), mutation)
    again = handle_sqlite(conn, request_of(invocation(attempt=2)), mutation)
    other = handle_sqlite(conn, request_of(invocation(args={"x": 1})), mutation)
    stale = handle_sqlite(
        conn, request_of(invocation("b", grants=(FencingGrant("r", 4),))), mutation
    )
    assert (first.status, first.replayed, parse_json(first.body)) == (
        200,
        False,
        {"row": 1, "attempt": 1},
    )
    assert first.fencing_acknowledged is True
    assert (again.status, again.replayed, again.body) == (200, True, first.body)
    assert again.fencing_acknowledged is True  # stored as 1, answered as a bool
    assert (other.status, other.outcome) == (422, OutcomeClass.PERMANENT)
    assert (stale.status, stale.outcome) == (409, OutcomeClass.STALE_FENCE)
    assert runs == [1]
    assert count(conn, "effects") == 1
    assert conn.execute("SELECT resource, token FROM effectus_dest_watermarks").fetchall() == [
        ("r", 5)
    ]


def test_handle_sqlite_refuses_a_connection_it_cannot_own_the_transaction_of(
    db_url: str, conn: sqlite3.Connection
) -> None:
    conn.execute("BEGIN")
    with pytest.raises(ValueError, match="owns the transaction"):
        handle_sqlite(conn, request_of(invocation()), insert_effect)
    conn.execute("ROLLBACK")
    implicit = sqlite3.connect(db_url.removeprefix("sqlite:///"))  # sqlite3's implicit BEGIN
    try:
        with pytest.raises(ValueError, match="isolation_level=None"):
            handle_sqlite(implicit, request_of(invocation()), insert_effect)
    finally:
        implicit.close()


def test_a_mutation_that_ends_the_transaction_leaves_the_key_unknown_not_repeated(
    conn: sqlite3.Connection,
) -> None:
    def commits(conn: sqlite3.Connection, request: EffectusRequest) -> Any:
        insert_effect(conn, request)
        conn.execute("COMMIT")  # breaks the kit's atomicity: its writes are now on their own
        return {}

    with pytest.raises(RuntimeError, match="ended the kit's transaction"):
        handle_sqlite(conn, request_of(invocation()), commits)
    retry = handle_sqlite(conn, request_of(invocation(attempt=2)), insert_effect)
    # The ledger row committed as in_progress: SQLite's only way to meet a key in progress.
    assert (retry.status, retry.outcome) == (409, OutcomeClass.UNKNOWN)
    assert count(conn, "effects") == 1


def test_an_async_mutation_is_refused_on_sqlite_before_anything_commits(
    db_url: str, conn: sqlite3.Connection
) -> None:
    async def async_mutation(conn: Any, request: EffectusRequest) -> Any:
        return {}

    with pytest.raises(TypeError, match="route /charge: on SQLite it must be a plain function"):
        effectus_app(db_url, {"/charge": async_mutation})
    with pytest.raises(TypeError, match="returned an awaitable"):
        handle_sqlite(conn, request_of(invocation()), lambda c, r: async_mutation(c, r))
    assert count(conn, "effectus_dest_keys") == 0


def test_prune_removes_only_expired_keys_and_a_replay_extends_a_key(
    conn: sqlite3.Connection,
) -> None:
    for key in ("short", "replayed"):
        handle_sqlite(
            conn, request_of(invocation(key)), insert_effect, retention=timedelta(seconds=30)
        )
    handle_sqlite(conn, request_of(invocation("long")), insert_effect)
    assert handle_sqlite(
        conn, request_of(invocation("replayed", attempt=2)), insert_effect
    ).replayed
    with pytest.raises(ValueError, match="timezone-aware"):
        prune_ledger_sqlite(conn, before=datetime.now())
    pruned = prune_ledger_sqlite(conn, before=datetime.now(UTC) + timedelta(hours=1), batch=1)
    assert pruned == 1
    keys = {key for (key,) in conn.execute("SELECT idempotency_key FROM effectus_dest_keys")}
    assert keys == {sha256_hex(b"long"), sha256_hex(b"replayed")}
    assert count(conn, "effects") == 3  # pruning forgets keys, not business rows


# --- one writer at a time -------------------------------------------------------------------


def test_a_second_request_waits_for_the_first_and_is_answered_with_its_replay(
    db_url: str,
) -> None:
    entered, release = threading.Event(), threading.Event()

    def held(conn: sqlite3.Connection, request: EffectusRequest) -> Any:
        result = insert_effect(conn, request)
        entered.set()
        assert release.wait(30)
        return result

    with connected(db_url) as one, connected(db_url) as two, ThreadPoolExecutor(2) as pool:
        first = pool.submit(handle_sqlite, one, request_of(invocation()), held)
        assert entered.wait(30)  # the first holds the write lock, its mutation blocked
        begun = when_it_begins(two)
        second = pool.submit(handle_sqlite, two, request_of(invocation(attempt=2)), held)
        assert begun.wait(30)  # the second is in BEGIN IMMEDIATE, behind the first
        assert not second.done()
        release.set()
        answers = first.result(30), second.result(30)
        assert count(one, "effects") == 1
    assert [(a.status, a.replayed) for a in answers] == [(200, False), (200, True)]
    assert answers[1].body == answers[0].body


def test_a_lock_held_past_the_busy_timeout_answers_503_with_nothing_committed(
    db_url: str,
) -> None:
    grants = (FencingGrant("r", 3),)
    with connected(db_url) as holder, connected(db_url, busy_timeout=0.05) as conn:
        holder.execute("BEGIN IMMEDIATE")  # another writer, e.g. another process, holds on
        refused = handle_sqlite(conn, request_of(invocation(grants=grants)), insert_effect)
        holder.execute("ROLLBACK")
        assert count(conn, "effectus_dest_keys") == count(conn, "effects") == 0
        retried = handle_sqlite(
            conn, request_of(invocation(attempt=2, grants=grants)), insert_effect
        )
    assert (refused.status, refused.outcome) == (503, OutcomeClass.RETRYABLE)
    assert refused.fencing_acknowledged is False  # nothing was checked: BEGIN never returned
    assert (retried.status, retried.replayed) == (200, False)


def test_threads_hammering_one_key_with_their_own_connections_mutate_once(db_url: str) -> None:
    threads, rounds = 6, 5
    barrier = threading.Barrier(threads, timeout=30)

    def hammer(worker: int) -> list[tuple[int, bool, bytes]]:
        with connected(db_url) as conn:
            barrier.wait()
            return [_answer(conn, attempt=worker * rounds + n + 1) for n in range(rounds)]

    with ThreadPoolExecutor(threads) as pool:
        answers = [answer for batch in pool.map(hammer, range(threads)) for answer in batch]
    _assert_one_mutation(db_url, answers, threads * rounds)


def _answer(conn: sqlite3.Connection, *, attempt: int) -> tuple[int, bool, bytes]:
    grants = (FencingGrant("account:a", attempt),)  # a newer token each attempt, as the daemon
    reply = handle_sqlite(
        conn, request_of(invocation("hammer", attempt=attempt, grants=grants)), insert_effect
    )
    return reply.status, reply.replayed, reply.body


def _assert_one_mutation(db_url: str, answers: list[tuple[int, bool, bytes]], total: int) -> None:
    assert len(answers) == total
    assert {status for status, _, _ in answers} == {200}
    assert [replayed for _, replayed, _ in answers].count(False) == 1
    assert len({body for _, _, body in answers}) == 1
    with connected(db_url) as conn:
        assert count(conn, "effects") == 1
        assert count(conn, "effectus_dest_keys") == 1


def hammer_process(db_url: str, worker: int, rounds: int, barrier: Any, results: Any) -> None:
    """In a child process (spawned, so module level): one connection, ``rounds`` requests."""
    with connected(db_url) as conn:
        barrier.wait(60)
        results.put([_answer(conn, attempt=worker * rounds + n + 1) for n in range(rounds)])


def test_two_processes_hammering_one_key_on_one_file_mutate_once(db_url: str) -> None:
    processes, rounds = 2, 10
    context = multiprocessing.get_context("spawn")  # no forked copies of this process's state
    barrier, results = context.Barrier(processes), context.Queue()
    children = [
        context.Process(target=hammer_process, args=(db_url, worker, rounds, barrier, results))
        for worker in range(processes)
    ]
    for child in children:
        child.start()
    try:
        answers = [answer for _ in children for answer in results.get(timeout=120)]
    finally:
        for child in children:
            child.join(30)
            if child.is_alive():
                child.kill()
    assert [child.exitcode for child in children] == [0] * processes
    _assert_one_mutation(db_url, answers, processes * rounds)


# --- from async code: the pool and the ASGI helper ------------------------------------------


async def test_the_pool_waits_for_the_lock_in_a_thread_not_on_the_event_loop(db_url: str) -> None:
    async with SqlitePool(db_url, size=1) as pool:
        begun = await pool.run(when_it_begins)
        with connected(db_url) as holder:
            holder.execute("BEGIN IMMEDIATE")
            waiting = asyncio.create_task(
                pool.run(lambda conn: handle_sqlite(conn, request_of(invocation()), insert_effect))
            )
            # Had the pool blocked the loop, this line would run only after the wait timed out.
            assert await asyncio.to_thread(begun.wait, 30)
            holder.execute("ROLLBACK")
        reply = await waiting
        assert (reply.status, reply.replayed) == (200, False)


async def test_the_pool_never_hands_on_a_connection_left_inside_a_transaction(
    db_url: str,
) -> None:
    async with SqlitePool(db_url, size=1) as pool:
        await pool.run(lambda conn: conn.execute("BEGIN IMMEDIATE"))
        assert await pool.run(lambda conn: conn.in_transaction) is False


async def test_over_http_a_locked_database_answers_503_then_the_retry_succeeds(
    db_url: str,
) -> None:
    async with SqlitePool(db_url, size=2, busy_timeout=0.05) as pool:
        app = routes_for({"/ok": effectus_endpoint(pool, insert_effect)})
        async with serving(app) as base_url:
            with connected(db_url) as holder:
                holder.execute("BEGIN IMMEDIATE")
                refused = await post(base_url, invocation(path="/ok"))
                holder.execute("ROLLBACK")
            retried = await post(base_url, invocation(attempt=2, path="/ok"))
    assert refused.status_code == 503
    assert refused.headers["x-effectus-outcome"] == "retryable_failure_known_not_committed"
    assert retried.status_code == 200
    assert retried.json() == {"row": 1, "attempt": 2}


# --- the example shop, on SQLite by default -------------------------------------------------


def shop_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SHOP_DATABASE_URL",)}
    return {**env, **extra}


def shop_charges(path: Path) -> int:
    with connected(f"sqlite:///{path}") as conn:
        return count(conn, "kit_shop_charges")


def test_the_kit_shop_defaults_to_sqlite_shop_db_where_it_is_run(tmp_path: Path) -> None:
    with started("kit_shop_service.py", None, cwd=tmp_path, env=shop_env()) as base_url:
        first, second = send_twice(base_url, "twice")
    assert first.status_code == second.status_code == 200
    assert first.json() == second.json()
    assert shop_charges(tmp_path / "shop.db") == 1


def test_the_kit_shop_reads_shop_database_url_not_the_dispatchers(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere" / "orders.db"
    target.parent.mkdir()
    env = shop_env(
        SHOP_DATABASE_URL=f"sqlite:///{target}",
        EFFECTUSD_DATABASE_URL=f"sqlite:///{tmp_path / 'dispatcher.db'}",
    )
    with started("kit_shop_service.py", None, cwd=tmp_path, env=env) as base_url:
        (response, _) = send_twice(base_url, "env")
    assert response.status_code == 200
    assert shop_charges(target) == 1
    assert not (tmp_path / "shop.db").exists()
    assert not (tmp_path / "dispatcher.db").exists()


async def test_the_shop_app_refuses_its_postgres_routes_on_sqlite(db_url: str) -> None:
    # The shop picks its SQLite routes itself; handing the kit the wrong kind fails at once.
    with pytest.raises(TypeError, match="route /inventory/reserve"):
        effectus_app(db_url, ROUTES)
    assert set(SQLITE_ROUTES) == set(ROUTES)

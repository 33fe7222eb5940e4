"""What the Python client raises, and that all of it is an EffectusError: a connection of the
wrong store, a database without (all of) the schema, a database URL no store understands."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest

import effectusd
from effectusd import (
    AsyncClient,
    Client,
    DatabaseURLError,
    EffectusError,
    SchemaNotReady,
    WrongConnection,
)
from effectusd.backends.migrations import MigrationError
from effectusd.core.operator_decisions import Refused
from tests.support import backends
from tests.support.backends import postgres_store_migrations as pg_migrations
from tests.support.harness import make_config, serial_plan

pytestmark = pytest.mark.postgres

CONFIG = make_config("http://127.0.0.1:9", {"pay": {}})
PLAN = serial_plan("order", ["pay"])


def sagas_in(url: str) -> int:
    with backends.connection(url) as conn:
        [row] = conn.execute("SELECT count(*) FROM effectus_saga_instances").fetchall()
    return int(row[0])


def test_every_error_the_client_raises_is_an_effectus_error() -> None:
    for name in (
        "SubmitError",
        "SubmitConflict",
        "SagaPruned",
        "PlanCheckError",
        "SchemaNotReady",
        "DatabaseURLError",
        "WrongConnection",
        "SagaNotFound",
        "WaitTimeout",
        "ConfigError",
        "WaitUnreachable",
    ):
        assert issubclass(getattr(effectusd, name), EffectusError), name
        assert name in effectusd.__all__
    # the standard bases callers may already catch stay
    assert issubclass(effectusd.SubmitError, ValueError)
    assert issubclass(effectusd.ConfigError, ValueError)
    assert issubclass(effectusd.SagaNotFound, LookupError)
    assert issubclass(effectusd.WaitTimeout, TimeoutError)
    assert issubclass(effectusd.WaitUnreachable, effectusd.WaitTimeout)
    assert issubclass(WrongConnection, TypeError)
    assert issubclass(MigrationError, EffectusError) and issubclass(Refused, EffectusError)


def test_the_daemon_is_exported_from_effectusd_and_imported_only_when_asked_for() -> None:
    import subprocess
    import sys

    from effectusd.dispatcher.daemon import Daemon

    assert effectusd.Daemon is Daemon and "Daemon" in effectusd.__all__
    # The client library alone does not load the dispatcher (nor its HTTP stack).
    probe = "import sys, effectusd; print('effectusd.dispatcher' in sys.modules)"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert loaded.stdout.strip() == "False", loaded.stderr
    with pytest.raises(AttributeError, match="no attribute 'Deamon'"):
        effectusd.Deamon  # noqa: B018


def test_a_connection_of_the_other_store_is_refused_and_nothing_is_written(
    db: str, tmp_path: Path
) -> None:
    from tests.conftest import migrated_sqlite

    lite = migrated_sqlite(tmp_path)
    on_postgres, on_sqlite = Client(CONFIG, database_url=db), Client(CONFIG, database_url=lite)

    with sqlite3.connect(backends.sqlite_path(lite)) as conn:
        with pytest.raises(WrongConnection, match=r"PostgreSQL store .* not a sqlite3\.Connection"):
            on_postgres.submit(PLAN, execution_id="o-1", conn=conn)
    with psycopg.connect(db) as conn:
        with pytest.raises(WrongConnection, match=r"SQLite store .* psycopg\.Connection"):
            on_sqlite.submit(PLAN, execution_id="o-1", conn=conn)
        conn.execute("SELECT 1")  # the caller's transaction was not touched
    assert (sagas_in(db), sagas_in(lite)) == (0, 0)


async def test_an_async_connection_is_refused_by_the_sync_client_and_vice_versa(
    db: str, tmp_path: Path
) -> None:
    from tests.conftest import migrated_sqlite

    lite = migrated_sqlite(tmp_path)
    async with await psycopg.AsyncConnection.connect(db) as conn:
        with pytest.raises(WrongConnection, match=r"AsyncClient takes a psycopg\.AsyncConnection"):
            Client(CONFIG, database_url=db).submit(PLAN, execution_id="o-1", conn=conn)  # type: ignore[arg-type]
        with pytest.raises(WrongConnection, match="configured for the SQLite store"):
            await AsyncClient(CONFIG, database_url=lite).submit(PLAN, execution_id="o-1", conn=conn)
    with sqlite3.connect(backends.sqlite_path(lite)) as lite_conn:
        with pytest.raises(WrongConnection, match=r"not a Connection; on SQLite pass"):
            await AsyncClient(CONFIG, database_url=db).submit(
                PLAN,
                execution_id="o-1",
                conn=lite_conn,  # type: ignore[arg-type]
            )
    assert (sagas_in(db), sagas_in(lite)) == (0, 0)


def _unmigrated(kind: str, tmp_path: Path, empty_database: str) -> str:
    if kind == "postgres":
        return empty_database
    path = tmp_path / "empty.db"
    sqlite3.connect(path).close()  # the file exists, with no table in it
    return f"sqlite:///{path}"


@pytest.mark.parametrize("kind", ["postgres", "sqlite"])
async def test_an_unmigrated_database_asks_for_migrate(
    kind: str, tmp_path: Path, empty_database: str
) -> None:
    url = _unmigrated(kind, tmp_path, empty_database)
    client = Client(CONFIG, database_url=url)
    for call in (
        lambda: client.submit(PLAN, execution_id="o-1"),
        lambda: client.get("0" * 64),
        lambda: client.list(),
    ):
        with pytest.raises(SchemaNotReady, match="run `effectusd migrate`"):
            call()
    if kind == "postgres":
        async_client = AsyncClient(CONFIG, database_url=url)
        with pytest.raises(SchemaNotReady, match="effectus_saga_instances"):
            await async_client.submit(PLAN, execution_id="o-1")
        with pytest.raises(SchemaNotReady):
            await async_client.get("0" * 64)
        async with await psycopg.AsyncConnection.connect(url) as conn:
            with pytest.raises(SchemaNotReady):
                await async_client.submit(PLAN, execution_id="o-1", conn=conn)


def test_a_schema_missing_a_later_migration_asks_for_migrate(empty_database: str) -> None:
    with psycopg.connect(empty_database, autocommit=True) as conn:
        before = [m for m in pg_migrations.known_migrations() if m.version < 10005]
        pg_migrations.migrate(conn, before)
    client = Client(CONFIG, database_url=empty_database)
    # The first thing missing that the submit touches: a later migration's column or table.
    with pytest.raises(SchemaNotReady, match=r"(trace_context|tombstones).*effectusd migrate"):
        client.submit(PLAN, execution_id="o-1")
    assert sagas_in(empty_database) == 0


@pytest.mark.parametrize("url", ["mysql://app:hunter2@db/shop", "sqlite://shop.db", ""])
def test_a_database_url_no_store_understands_is_refused_up_front(url: str) -> None:
    with pytest.raises(DatabaseURLError) as refused:
        Client(CONFIG, database_url=url or " ")
    assert "hunter2" not in str(refused.value) and "expected" in str(refused.value)


def test_a_sqlite_schema_missing_a_later_column_asks_for_migrate(tmp_path: Path) -> None:
    from effectusd.backends.sqlite import migrations as sqlite_store_migrations
    from effectusd.store.sql import SQLITE_MIGRATIONS as STORE_MIGRATIONS

    lite = f"sqlite:///{tmp_path / 'old.db'}"
    with backends.connection(lite, create=True) as conn:
        older = [m for m in STORE_MIGRATIONS.known() if m.version < 10009]
        sqlite_store_migrations.migrate(conn, STORE_MIGRATIONS, older)
    with pytest.raises(SchemaNotReady, match=r"trace_context.*effectusd migrate"):
        Client(CONFIG, database_url=lite).submit(PLAN, execution_id="o-1")
    assert sagas_in(lite) == 0

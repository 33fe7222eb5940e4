"""Shared fixtures. Storage tests use a real PostgreSQL: one fresh database per test run.

Without PostgreSQL the storage tests are skipped locally; with EFFECTUSD_REQUIRE_POSTGRES=1
(set by .ci/run) a missing server fails the run instead.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest

from tests.conformance.support import StoreUnderTest
from tests.support import backends
from tests.support.required import missing

ADMIN_URL = os.environ.get(
    "EFFECTUSD_TEST_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
EFFECTUS_TABLES = (
    "effectus_saga_events",
    "effectus_saga_attempts",
    "effectus_saga_outbox",
    "effectus_saga_steps",
    "effectus_saga_instances",
    "effectus_fencing_leases",
    "effectus_fencing_counters",
    "effectus_saga_tombstones",
)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked serial needs the machine alone (it may restart PostgreSQL under everyone):
    beside other test workers it fails instead of running."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if item.get_closest_marker("serial") is not None and workers > 1:
        pytest.fail(f"marked serial, so not beside {workers - 1} other worker(s): run without -n")


def _url_for(database: str) -> str:
    return ADMIN_URL.rsplit("/", 1)[0] + "/" + database


def create_database(prefix: str = "effectusd_test", template: str | None = None) -> str:
    """Create an empty database (a copy of the database of the URL ``template``, which nothing
    may be connected to) and return its URL (fails or skips if PostgreSQL is absent)."""
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    copied = "" if template is None else f' TEMPLATE "{template.rsplit("/", 1)[1]}"'
    try:
        with psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=5) as admin:
            admin.execute(f'CREATE DATABASE "{name}"{copied}')
    except psycopg.OperationalError as exc:
        missing(f"PostgreSQL unreachable at {ADMIN_URL}: {exc}")
    return _url_for(name)


def drop_database(url: str) -> None:
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    """A migrated database shared by the run; tests that use ``db`` get it emptied first."""
    url = create_database()
    with psycopg.connect(url, autocommit=True) as conn:
        backends.migrate(conn)
    yield url
    drop_database(url)


@pytest.fixture
def db(database_url: str) -> str:
    """The migrated test database, with every effectus table empty."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {', '.join(EFFECTUS_TABLES)} RESTART IDENTITY CASCADE")
    return database_url


@pytest.fixture
def empty_database() -> Iterator[str]:
    """A database with no schema at all, for migration tests."""
    url = create_database("effectusd_empty")
    yield url
    drop_database(url)


def migrated_sqlite(directory: Path) -> str:
    """A new SQLite store file in ``directory``, migrated; its URL."""

    url = f"sqlite:///{directory / 'effectusd.db'}"
    with backends.connection(url, create=True) as conn:
        backends.migrate(conn)
    return url


@pytest.fixture(params=["postgres", "sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty, migrated store: each test using it runs once per store."""
    if request.param == "sqlite":
        return migrated_sqlite(tmp_path)
    url: str = request.getfixturevalue("db")
    return url


# The ``store`` fixture of the conformance suite (and of tests that check a store's statements
# the same way): each test using it runs once per store, on an empty, migrated database
# (PostgreSQL: the shared test database, emptied; SQLite: a new file).
@pytest.fixture(
    params=[pytest.param("postgres", marks=pytest.mark.postgres), pytest.param("sqlite")]
)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StoreUnderTest]:
    if request.param == "postgres":
        url = request.getfixturevalue("db")
    else:
        url = f"sqlite:///{tmp_path / 'effectusd.db'}"
        with backends.connection(url, create=True) as conn:
            backends.migrate(conn)
    under_test = StoreUnderTest(request.param, url)
    try:
        yield under_test
    finally:
        await under_test.close()

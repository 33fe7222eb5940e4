"""The ``store`` fixture: each conformance test runs once per store, on an empty, migrated
database (PostgreSQL: the shared test database, emptied; SQLite: a new file)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conformance.support import StoreUnderTest
from tests.support import backends


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

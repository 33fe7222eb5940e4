"""Fixtures of the tests of several stores fencing through one authority."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import drop_database
from tests.integration.test_fencing_across_stores import migrated_postgres
from tests.support.authority import migrated_authority


@pytest.fixture
def authority() -> Iterator[str]:
    """A migrated fencing authority's URL, dropped afterwards."""
    url = migrated_authority()
    yield url
    drop_database(url)


@pytest.fixture
def stores() -> Iterator[dict[str, str]]:
    """Two migrated PostgreSQL stores, labelled a and b, dropped afterwards."""
    urls = {"a": migrated_postgres(), "b": migrated_postgres()}
    yield urls
    for url in urls.values():
        drop_database(url)

"""A fencing authority's database for a test: created, migrated, its URL returned (the test
drops it)."""

from __future__ import annotations

from effectusd.fencing.authority import authority_backend
from tests.conftest import create_database


def migrated_authority() -> str:
    url = create_database("effectusd_authority")
    backend = authority_backend(url)
    with backend.runner.connect() as conn:
        backend.migrator.migrate(conn)
    return url

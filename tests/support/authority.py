"""A fencing authority's database for a test: created, migrated, its URL returned (the test
drops it); a configuration of several stores fenced through it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from effectusd.fencing.authority import authority_backend
from tests.conftest import create_database


def migrated_authority() -> str:
    url = create_database("effectusd_authority")
    backend = authority_backend(url)
    with backend.runner.connect() as conn:
        backend.migrator.migrate(conn)
    return url


def stores_fenced_by(path: Path, authority: str, stores: Mapping[str, str]) -> Path:
    """Write at ``path`` a configuration of ``stores`` (label: URL, each in namespace
    ``ns-LABEL``) fenced through ``authority``; returns ``path``."""
    path.write_text(
        f'[fencing]\nurl = "{authority}"\n'
        + "".join(
            f'[database.stores.{label}]\nurl = "{url}"\nnamespace = "ns-{label}"\n'
            for label, url in stores.items()
        )
    )
    return path

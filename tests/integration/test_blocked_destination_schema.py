"""Migration 10025 on both stores: sagas and dispatches may be blocked_destination (a blocked
saga still says why), and a state nobody defined is still refused. The daemon's own writes of
the state (an attempt settled to it, the rows moved to it) are tests/integration/
test_plain_services.py's."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest

from tests.integration.test_migrations import submit_example_saga
from tests.support import backends


def write(url: str, statement: str) -> None:
    """One statement in its own transaction, on either store."""
    if backends.is_sqlite(url):
        with sqlite3.connect(backends.sqlite_path(url), isolation_level=None) as conn:
            conn.execute(statement)
        return
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement)  # type: ignore[arg-type]


REFUSED = (sqlite3.IntegrityError, psycopg.errors.CheckViolation)


def test_sagas_and_dispatches_may_be_blocked_destination_and_nothing_unknown(
    store_url: str,
) -> None:
    submit_example_saga(store_url)
    write(
        store_url,
        "UPDATE effectus_saga_instances"
        " SET state = 'blocked_destination', stop_reason = 'HTTP 401'",
    )
    write(store_url, "UPDATE effectus_saga_outbox SET state = 'blocked_destination', attempt = 1")
    for statement in (
        "UPDATE effectus_saga_instances SET stop_reason = NULL",  # a blocked saga says why
        "UPDATE effectus_saga_instances SET state = 'blocked_elsewhere'",
        "UPDATE effectus_saga_outbox SET state = 'blocked_elsewhere'",
    ):
        with pytest.raises(REFUSED):
            write(store_url, statement)

"""Fencing counters outlive everything: no row delete may reset a resource's tokens."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest

from tests.support import backends


def test_a_fencing_counter_cannot_be_deleted(store_url: str) -> None:
    with backends.connection(store_url) as conn:
        conn.execute(
            "INSERT INTO effectus_fencing_counters (resource, last_token) VALUES ('account:a', 7)"
        )
        with pytest.raises((psycopg.Error, sqlite3.Error), match="may not be deleted"):
            conn.execute("DELETE FROM effectus_fencing_counters WHERE resource = 'account:a'")
        [(token,)] = conn.execute(
            "SELECT last_token FROM effectus_fencing_counters WHERE resource = 'account:a'"
        ).fetchall()
    assert token == 7

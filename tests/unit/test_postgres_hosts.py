"""A URL naming several hosts asks for the writable one, unless it says otherwise."""

from __future__ import annotations

import pytest
from psycopg.conninfo import conninfo_to_dict

from effectusd.backends.postgres.hosts import primary_conninfo


@pytest.mark.parametrize(
    ("given", "wanted"),
    [
        ("postgresql://u@db1:5432,db2:5432/app", "read-write"),
        ("host=db1,db2 port=5432,5433 dbname=app", "read-write"),
        ("postgresql://u@db1,db2/app?target_session_attrs=any", "any"),
        ("postgresql://u@db1,db2/app?target_session_attrs=primary", "primary"),
        ("postgresql://u@db1:5432/app", None),
        ("host=db1 dbname=app", None),
    ],
)
def test_several_hosts_ask_for_the_writable_one_unless_the_url_says(
    given: str, wanted: str | None
) -> None:
    params = conninfo_to_dict(primary_conninfo(given))
    assert params.get("target_session_attrs") == wanted
    assert params["dbname"] == "app"


def test_one_host_is_handed_on_unchanged() -> None:
    url = "postgresql://u:secret@db1:5432/app?sslmode=require"
    assert primary_conninfo(url) == url

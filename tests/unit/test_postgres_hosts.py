"""A URL naming several hosts asks for the writable one, unless it says otherwise; the
connection string handed to psycopg is built from the parameters parsed when the URL was read."""

from __future__ import annotations

import pytest
from psycopg.conninfo import conninfo_to_dict

from effectusd.backends.postgres.hosts import primary_conninfo
from effectusd.backends.postgres.session import open_bound
from effectusd.core.database_url import DatabaseURLError, PostgresDatabase, parse_database_url


def database(url: str) -> PostgresDatabase:
    parsed = parse_database_url(url)
    assert isinstance(parsed, PostgresDatabase)
    return parsed


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
    params = conninfo_to_dict(primary_conninfo(database(given)))
    assert params.get("target_session_attrs") == wanted
    assert params["dbname"] == "app"


def test_one_host_is_handed_on_with_every_parameter_as_given() -> None:
    url = "postgresql://u:s%40cret@db1:5432/app?sslmode=require"
    assert conninfo_to_dict(primary_conninfo(database(url))) == conninfo_to_dict(url)


def test_a_parameter_libpq_does_not_know_is_a_database_url_error_quoting_nothing() -> None:
    url = "postgresql://app:SECRET-pw@db1/app?sslmdoe=require"

    with pytest.raises(DatabaseURLError) as refused:
        primary_conninfo(database(url))

    assert "SECRET-pw" not in str(refused.value) and "sslmdoe" not in str(refused.value)
    assert refused.value.__suppress_context__


@pytest.mark.parametrize(
    ("conninfo", "bound"),
    [
        ("host=db1 dbname=effectusd connect_timeout=3", 8.0),
        ("host=db1 dbname=effectusd", 30.0),
        ("host=db1 connect_timeout=0", 30.0),  # libpq's "wait forever": the pool's own bound
    ],
)
def test_opening_the_daemons_pool_is_bounded_by_the_urls_connect_timeout(
    conninfo: str, bound: float
) -> None:
    assert open_bound(conninfo) == bound

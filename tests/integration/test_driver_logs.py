"""The daemon's log while its pool reconnects to a server that refuses it: the driver's own
lines name the failure's class (and SQLSTATE), never the server's message, which quotes the
user (and the host)."""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from tests.conftest import ADMIN_URL
from tests.support.harness import daemon_running, make_config

pytestmark = pytest.mark.postgres


@pytest.fixture
def own_role(db: str) -> Iterator[tuple[str, str]]:
    """A login role of its own (its name is what a driver's message would quote) and the test
    database's URL as that role."""
    role = f"effectusd_secret_role_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{role}" LOGIN SUPERUSER')
    try:
        yield role, db.replace("://postgres@", f"://{role}@", 1)
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )
            admin.execute(f'DROP ROLE "{role}"')


def refuse_logins(role: str, refused: bool) -> None:
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'ALTER ROLE "{role}" {"NOLOGIN" if refused else "LOGIN"}')
        if refused:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )


async def test_a_pool_reconnecting_to_a_refusing_server_logs_the_class_never_the_message(
    own_role: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    role, url = own_role
    config = make_config("http://127.0.0.1:9", {"do": {}}, database={"pool_min_size": 1})
    caplog.set_level(logging.INFO)
    async with daemon_running(config, url) as daemon:
        async with asyncio.timeout(20):
            while not daemon.started:
                await asyncio.sleep(0.02)
        refuse_logins(role, True)
        try:
            async with asyncio.timeout(30):
                while not any("error connecting" in r.getMessage() for r in caplog.records):
                    await asyncio.sleep(0.05)
        finally:
            refuse_logins(role, False)

    lines = [record.getMessage() for record in caplog.records]
    assert not [line for line in lines if role in line]
    failed = [line for line in lines if "error connecting" in line]
    # a class and, when the server sent one, its SQLSTATE: "OperationalError" for the refused
    # login, "AdminShutdown 57P01" for a connection terminated while it was being opened
    shape = re.compile(r"error connecting in '[^']+': [A-Z][A-Za-z]+( [0-9A-Z]{5})?")
    assert failed and all(shape.fullmatch(line) for line in failed), failed

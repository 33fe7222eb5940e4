"""A database URL naming several hosts (the form an application uses with a standby) works in
the config file, the client, the command line and the daemon; a host that does not answer is
passed over. The failover itself: tests/failover."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import psycopg
import pytest
from click.testing import CliRunner

from effectusd.cli import main
from effectusd.config import load_config
from tests.support.destination import ok, running
from tests.support.harness import client_for, daemon_running, make_config, serial_plan

pytestmark = pytest.mark.postgres

DEAD_HOST = "127.0.0.1:1"  # nothing listens there: refused at once


def two_hosts(url: str) -> str:
    """``url`` with a dead host before its own."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    return (
        f"postgresql://{info['user']}@{DEAD_HOST},{info['host']}:{info.get('port', 5432)}"
        f"/{info['dbname']}?target_session_attrs=read-write"
    )


def keywords(url: str) -> str:
    """``url`` in libpq's keyword form, with a dead host before its own."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    return (
        f"host=127.0.0.1,{info['host']} port=1,{info.get('port', 5432)} "
        f"user={info['user']} dbname={info['dbname']}"
    )


def test_a_multi_host_url_works_in_the_config_file_the_client_and_the_cli(
    db: str, tmp_path: Path
) -> None:
    url = two_hosts(db)
    config_file = tmp_path / "effectusd.toml"
    config_file.write_text(
        f'[database]\nurl = "{url}"\n'
        '[destinations.dest]\nbase_url = "http://127.0.0.1:9"\n'
        '[verbs.do]\ndestination = "dest"\npath = "/do"\n'
    )
    config = load_config(config_file)
    assert config.database.url == url
    submitted = client_for(config, config.database.url).submit(
        serial_plan("multi", ["do"]), execution_id="m-1"
    )
    by_keywords = client_for(config, keywords(db)).get(submitted.saga_id)
    assert by_keywords is not None and by_keywords.saga_id == submitted.saga_id

    env = {"EFFECTUSD_CONFIG": None, "EFFECTUSD_DATABASE_URL": None}
    listed = CliRunner().invoke(
        main, ["--config", str(config_file), "sagas", "list", "--json"], env=env
    )
    assert listed.exit_code == 0, listed.output
    assert [saga["saga_id"] for saga in json.loads(listed.output)] == [submitted.saga_id]


async def test_readyz_says_which_replication_mode_and_timeline_the_daemon_runs_on(db: str) -> None:
    with running(ok) as dest:
        config = make_config(dest.base_url, {"do": {}}, observability={"http_port": 0})
        client = client_for(config, two_hosts(db))
        saga = client.submit(serial_plan("ready", ["do"]), execution_id="r-1").saga_id
        async with daemon_running(config, two_hosts(db)) as daemon:
            async with asyncio.timeout(20):
                while daemon.http_port is None or client.get(saga).state != "completed":  # type: ignore[union-attr]
                    await asyncio.sleep(0.02)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{daemon.http_port}") as http:
                ready = await http.get("/readyz")

    assert ready.status_code == 200
    replication = ready.json()["replication"]
    with psycopg.connect(db) as conn:
        standbys = conn.execute("SELECT count(*) FROM pg_stat_replication").fetchone()
    assert standbys == (0,)  # the shared test server has none
    assert replication["mode"] == "standalone"
    assert isinstance(replication["timeline"], int) and replication["timeline"] >= 1
    assert replication["synchronous_commit"] in ("on", "remote_write", "remote_apply")
    assert replication["connections_opened"] >= 1 and replication["connections_refused"] == 0
    assert replication["warning"] is None

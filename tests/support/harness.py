"""Helpers to run real daemons (in-process or as `effectusd run` processes) against a test DB."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from effectusd.client import Client
from effectusd.config import Config, parse_config
from effectusd.dispatcher.daemon import Daemon
from effectusd.executors.protocol import Executor
from tests.support import backends


def make_config(base_url: str, verbs: Mapping[str, Mapping[str, Any]], **sections: Any) -> Config:
    """One destination "dest" at ``base_url``; fast polling so tests do not wait on timers."""
    data: dict[str, Any] = {
        "destinations": {"dest": {"base_url": base_url, "timeout": "2s", "max_concurrency": 16}},
        "dispatcher": {"poll_interval": "50ms", "lease_margin": "2s", "shutdown_grace": "5s"},
        "verbs": {
            name: {"destination": "dest", "path": f"/{name}", **body}
            for name, body in verbs.items()
        },
    }
    for key, value in sections.items():
        data.setdefault(key, {}).update(value)
    return parse_config(data)


async def run_until_idle(config: Config, url: str, **kwargs: Any) -> Daemon:
    daemon = Daemon(config, url, **kwargs)
    await asyncio.wait_for(daemon.run(until_idle=True), timeout=60)
    return daemon


@contextlib.asynccontextmanager
async def daemon_running(
    config: Config, url: str, executors: Mapping[str, Executor] | None = None, **kwargs: Any
) -> AsyncIterator[Daemon]:
    daemon = Daemon(config, url, executors=executors, **kwargs)
    task = asyncio.create_task(daemon.run())
    try:
        yield daemon
    finally:
        daemon.stopping.set()
        await asyncio.wait_for(task, timeout=30)


def fetch(url: str, query: str, *params: Any) -> list[dict[str, Any]]:
    """Rows of a query with %s placeholders, on either store (plain SQL both understand)."""
    if backends.is_sqlite(url):
        with backends.connection(url) as conn:
            assert isinstance(conn, sqlite3.Connection)
            cursor = conn.execute(query.replace("%s", "?"), params)
            columns = [column[0] for column in cursor.description]
            return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
    with psycopg.connect(url, row_factory=dict_row) as pg:
        return pg.execute(query, params).fetchall()  # type: ignore[arg-type]


def attempts_of(
    url: str, saga_id: str, effect_id: str, direction: str = "forward"
) -> list[dict[str, Any]]:
    return fetch(
        url,
        """SELECT a.* FROM effectus_saga_attempts a JOIN effectus_saga_outbox o USING (dispatch_id)
           WHERE o.saga_id = %s AND o.effect_id = %s AND o.direction = %s ORDER BY a.attempt""",
        saga_id,
        effect_id,
        direction,
    )


def dispatch_of(
    url: str, saga_id: str, effect_id: str, direction: str = "forward"
) -> dict[str, Any]:
    rows = fetch(
        url,
        "SELECT * FROM effectus_saga_outbox"
        " WHERE saga_id = %s AND effect_id = %s AND direction = %s",
        saga_id,
        effect_id,
        direction,
    )
    assert len(rows) == 1, rows
    return rows[0]


def serial_plan(
    plan_id: str, verbs: list[str], compensate: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Steps s1..sN calling ``verbs`` in order; ``compensate`` maps step ids to inverse verbs."""
    compensate = compensate or {}
    return {
        "plan_id": plan_id,
        "steps": [
            {
                "id": f"s{i}",
                "verb": verb,
                "args": {"n": i},
                "compensate": (
                    {"verb": compensate[f"s{i}"], "args": {"n": i}}
                    if f"s{i}" in compensate
                    else "none"
                ),
            }
            for i, verb in enumerate(verbs, start=1)
        ],
    }


def write_config_file(tmp: Path, config: Config) -> Path:
    """The TOML form of a test config, for `effectusd run` processes."""
    lines = [f'namespace = "{config.namespace}"', "[dispatcher]"]
    d = config.dispatcher
    lines += [
        f"concurrency = {d.concurrency}",
        f'lease_margin = "{d.lease_margin.total_seconds()}s"',
        f'poll_interval = "{d.poll_seconds(1.0)}s"',
        f'shutdown_grace = "{d.shutdown_grace.total_seconds()}s"',
    ]
    for name, dest in config.destinations.items():
        lines += [
            f"[destinations.{name}]",
            f'base_url = "{dest.base_url}"',
            f'timeout = "{dest.timeout.total_seconds()}s"',
            f"max_concurrency = {dest.max_concurrency}",
        ]
        if dest.bearer_token_env:
            lines.append(f'bearer_token_env = "{dest.bearer_token_env}"')
    for name, verb in config.verbs.items():
        body = verb.canonical()
        lines += [
            f'[verbs."{name}"]',
            f"version = {body['version']}",
            f'destination = "{verb.destination}"',
            f'path = "{verb.path}"',
            f'delivery = "{verb.delivery.value}"',
            f"fencing = {json.dumps(list(verb.fencing))}",
            f"retry = {{ max_attempts = {verb.retry.max_attempts}, "
            f'initial_backoff = "{verb.retry.initial_backoff.total_seconds()}s", '
            f'max_backoff = "{verb.retry.max_backoff.total_seconds()}s" }}',
        ]
        if verb.timeout is not None:
            lines.append(f'timeout = "{verb.timeout.total_seconds()}s"')
    path = tmp / "effectusd.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def spawn_daemon(
    config_file: Path, url: str, *args: str, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "effectusd.cli",
            "--config",
            str(config_file),
            "--database-url",
            url,
            "run",
            *args,
        ],
        env={**os.environ, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def client_for(config: Config, url: str) -> Client:
    return Client(config, database_url=url)

"""The daemon's view of its PostgreSQL server's replication: read on every connection it opens
(at start, and each reconnect after a failover), decided by effectusd/core/replication.py,
logged when it changes and reported on ``/readyz``.

A connection that lands on a standby, or (with ``database.require_synchronous_replication``)
on a server whose standbys commits do not wait for, is refused here: the pool drops it and
connects again, so nothing runs on it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg.rows import dict_row

from effectusd.backends.postgres.runner import sql
from effectusd.backends.statements import Statements
from effectusd.core.replication import (
    ASYNCHRONOUS_WARNING,
    REFUSED_SERVERS,
    ReplicationMode,
    ServerReplication,
    check_server,
    describe,
    raised_commit_level,
)

log = logging.getLogger("effectusd.replication")

STATEMENTS = Statements("effectusd", "sql/postgres/backend")


def server_of(conn: psycopg.Connection[Any]) -> ServerReplication:
    """What ``conn``'s server says (replication_state.sql), its ``synchronous_commit`` as the
    daemon's connections raise it."""
    with conn.cursor(row_factory=dict_row) as cursor:
        cursor.execute(sql(STATEMENTS, "replication_state"))
        row = cursor.fetchone()
    assert row is not None
    level = raised_commit_level(row["synchronous_commit"])
    if level is not None and not row["in_recovery"]:
        row = {**row, "synchronous_commit": level}
    return _server(row)


def _server(row: Mapping[str, Any]) -> ServerReplication:
    return ServerReplication(
        in_recovery=bool(row["in_recovery"]),
        timeline=row["timeline"],
        synchronous_standby_names=str(row["synchronous_standby_names"]),
        synchronous_commit=str(row["synchronous_commit"]),
        standbys=int(row["standbys"]),
        synchronous_standbys=int(row["synchronous_standbys"]),
        read_only=bool(row["read_only"]),
    )


class ReplicationWatch:
    """What the daemon's connections found about their server (the latest kept), shared by
    its pool and its start-up check."""

    def __init__(self, *, require_synchronous: bool) -> None:
        self.require_synchronous = require_synchronous
        self.current: ServerReplication | None = None
        self.previous_timeline: int | None = None  # before the latest change of timeline
        self.connections = 0  # opened and accepted
        self.refused = 0  # dropped: a standby, or not synchronous when that is required
        self._since: float | None = None  # monotonic time of the latest change

    async def connected(self, conn: psycopg.AsyncConnection[Any]) -> ServerReplication:
        """Read ``conn``'s server, raise its commit level; refuse it (raise) if unusable."""
        async with conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(sql(STATEMENTS, "replication_state"))
            row = await cursor.fetchone()
            assert row is not None
            level = raised_commit_level(row["synchronous_commit"])
            if level is not None and not row["in_recovery"]:
                await cursor.execute(sql(STATEMENTS, "raise_synchronous_commit"), {"level": level})
                row = {**row, "synchronous_commit": level}
        try:
            return self._observe(_server(row))
        except REFUSED_SERVERS as exc:  # a reconnect: the log says why it was dropped
            log.error("%s", exc)
            raise

    def connected_sync(self, conn: psycopg.Connection[Any]) -> ServerReplication:
        """``connected`` on a synchronous connection (the daemon's start-up check, which
        stops the daemon with the refusal's one line)."""
        return self._observe(server_of(conn))

    def _observe(self, server: ServerReplication) -> ServerReplication:
        try:
            check_server(server, require_synchronous=self.require_synchronous)
        except REFUSED_SERVERS:
            self.refused += 1
            raise
        self.connections += 1
        before = self.current
        self.current = server
        if before is None or (before.mode, before.timeline) != (server.mode, server.timeline):
            self._since = time.monotonic()
            self._report_change(before, server)
        return server

    def _report_change(self, before: ServerReplication | None, server: ServerReplication) -> None:
        if before is not None and before.timeline != server.timeline:
            self.previous_timeline = before.timeline
            log.warning(
                "database: now on timeline %s (was %s): the server failed over or was "
                "restored; connections were opened again",
                server.timeline,
                before.timeline,
            )
        log.info(
            "database: replication %s (timeline %s, %d standby(s), %d synchronous; "
            "synchronous_commit %s)",
            server.mode.value,
            server.timeline,
            server.standbys,
            server.synchronous_standbys,
            server.synchronous_commit,
        )
        if server.mode is ReplicationMode.ASYNCHRONOUS:
            log.warning("database: %s", ASYNCHRONOUS_WARNING)
        if server.mode is ReplicationMode.SYNCHRONOUS and server.synchronous_standbys == 0:
            log.warning(
                "database: synchronous replication is configured but no synchronous standby "
                "is seen connected (or the role may not see it: grant pg_monitor); commits "
                "wait until one is"
            )

    def report(self) -> dict[str, object]:
        """The ``/readyz`` body's ``replication`` entry."""
        if self.current is None:
            return {"mode": "unknown", "refused": self.refused}
        since = None if self._since is None else round(time.monotonic() - self._since, 1)
        return {
            **describe(self.current),
            "previous_timeline": self.previous_timeline,
            "seconds_since_change": since,
            "connections_opened": self.connections,
            "connections_refused": self.refused,
            "warning": ASYNCHRONOUS_WARNING
            if self.current.mode is ReplicationMode.ASYNCHRONOUS
            else None,
        }

"""What a PostgreSQL server's replication settings mean for the daemon's guarantees
(docs/operations.md section 9): read by the backend at start and on every new connection,
decided here, reported on ``/readyz`` and in the log.

A write-ahead ("may have been sent") and a fencing grant are commits. With a synchronous
standby and ``synchronous_commit`` at ``remote_write`` or above, a commit returns only once the
standby has it, so a failover to that standby keeps it. With standbys but no synchronous
replication, a failover may lose the last commits: a request that did go out looks never sent,
and an ``at_most_once`` step may be sent again. Fencing tokens stay monotonic either way
(the timeline is in their high bits: docs/design.md section 8).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ReplicationMode(StrEnum):
    STANDALONE = "standalone"  # no standby streaming, none synchronous: no failover to one
    SYNCHRONOUS = "synchronous"  # commits wait for a synchronous standby
    ASYNCHRONOUS = "asynchronous"  # standbys stream, commits do not wait for them


class ReadOnlyServer(Exception):
    """A connection landed on a server that takes no writes (a standby in recovery, or
    ``default_transaction_read_only`` on): the daemon drops it, a command that writes stops."""


class SynchronousReplicationRequired(Exception):
    """``database.require_synchronous_replication`` is set and the server has standbys that
    commits do not wait for."""


REFUSED_SERVERS = (ReadOnlyServer, SynchronousReplicationRequired)

# synchronous_commit values weakest first; remote_write and above wait for a synchronous standby.
_COMMIT_LEVELS = ("off", "local", "remote_write", "on", "remote_apply")
GUARDED_COMMIT = "remote_write"  # the least the daemon's guarded writes ask for

ASYNCHRONOUS_WARNING = (
    "the database has standbys but commits do not wait for any (synchronous_standby_names is "
    "empty): a failover may lose the last write-aheads, and an at_most_once step may then be "
    "sent twice; fencing tokens stay monotonic (docs/operations.md section 9)"
)


@dataclass(frozen=True, slots=True)
class ServerReplication:
    """What one connection read from its server (replication_state.sql)."""

    in_recovery: bool
    timeline: int | None  # None on a standby (it writes no WAL of its own)
    synchronous_standby_names: str
    synchronous_commit: str  # the connection's, after the daemon raised it
    standbys: int  # WAL senders streaming to standbys
    synchronous_standbys: int  # of those, the ones a commit waits for ("sync" or "quorum")
    read_only: bool = False  # transactions are read-only by default (a setting, or recovery)

    @property
    def mode(self) -> ReplicationMode:
        return replication_mode(self)


def replication_mode(server: ServerReplication) -> ReplicationMode:
    waits = (
        server.synchronous_standby_names.strip() != ""
        and server.synchronous_commit in _COMMIT_LEVELS[_COMMIT_LEVELS.index(GUARDED_COMMIT) :]
    )
    if waits:
        return ReplicationMode.SYNCHRONOUS
    if server.standbys > 0 or server.synchronous_standby_names.strip():
        return ReplicationMode.ASYNCHRONOUS
    return ReplicationMode.STANDALONE


def raised_commit_level(current: str) -> str | None:
    """What the daemon sets ``synchronous_commit`` to on its connections, or None to keep
    ``current``: ``off`` and ``local`` are raised to ``remote_write``, so a guarded write waits
    for a synchronous standby where there is one (and for the local disk, which the
    write-ahead needs anyway). A claim that wrote nothing ahead still commits with ``off``
    for its own transaction (claim_ready.sql)."""
    if current not in _COMMIT_LEVELS:
        return GUARDED_COMMIT
    if _COMMIT_LEVELS.index(current) < _COMMIT_LEVELS.index(GUARDED_COMMIT):
        return GUARDED_COMMIT
    return None


def require_writable(server: ServerReplication) -> None:
    """Refuse a server that takes no writes: a standby in recovery, or one whose transactions
    are read-only by default (``default_transaction_read_only``, set for the server, the
    database or the role). The daemon's check at start and on every connection, and that of
    every command that writes."""
    if server.in_recovery:
        raise ReadOnlyServer(
            "database: the server is a standby in recovery (read-only); the connection is "
            "dropped (give every host in the URL and target_session_attrs=read-write)"
        )
    if server.read_only:
        raise ReadOnlyServer(
            "database: the server takes no writes (default_transaction_read_only is on for "
            "it, this database or this role); the connection is dropped (point the URL at a "
            "writable database, or turn the setting off)"
        )


def check_server(server: ServerReplication, *, require_synchronous: bool) -> None:
    """Refuse a server this daemon must not use: one that takes no writes
    (``require_writable``), or one whose standbys do not take commits synchronously when
    synchronous replication is required."""
    require_writable(server)
    if require_synchronous and server.mode is ReplicationMode.ASYNCHRONOUS:
        raise SynchronousReplicationRequired(
            "database.require_synchronous_replication: the server has standbys but commits do "
            "not wait for any (set synchronous_standby_names on the server, or turn the "
            "option off to run with the risk stated in docs/operations.md section 9)"
        )


def describe(server: ServerReplication) -> dict[str, object]:
    """The ``/readyz`` body's ``replication`` entry."""
    return {
        "mode": server.mode.value,
        "timeline": server.timeline,
        "standbys": server.standbys,
        "synchronous_standbys": server.synchronous_standbys,
        "synchronous_commit": server.synchronous_commit,
    }

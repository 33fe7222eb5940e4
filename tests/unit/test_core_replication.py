"""What a server's replication settings mean for the daemon (effectusd/core/replication.py)."""

from __future__ import annotations

import pytest

from effectusd.core.replication import (
    ReadOnlyServer,
    ReplicationMode,
    ServerReplication,
    SynchronousReplicationRequired,
    check_server,
    raised_commit_level,
    replication_mode,
    require_writable,
)


def server(
    names: str = "", commit: str = "on", standbys: int = 0, in_recovery: bool = False
) -> ServerReplication:
    return ServerReplication(
        in_recovery=in_recovery,
        timeline=None if in_recovery else 1,
        synchronous_standby_names=names,
        synchronous_commit=commit,
        standbys=standbys,
        synchronous_standbys=0,
    )


@pytest.mark.parametrize(
    ("names", "commit", "standbys", "mode"),
    [
        ("", "on", 0, ReplicationMode.STANDALONE),
        ("", "on", 1, ReplicationMode.ASYNCHRONOUS),
        ("s1", "on", 1, ReplicationMode.SYNCHRONOUS),
        ("s1", "remote_write", 1, ReplicationMode.SYNCHRONOUS),
        ("s1", "remote_apply", 0, ReplicationMode.SYNCHRONOUS),  # commits wait for it
        ("FIRST 1 (s1, s2)", "local", 2, ReplicationMode.ASYNCHRONOUS),  # they do not wait
        ("s1", "off", 0, ReplicationMode.ASYNCHRONOUS),
        ("  ", "on", 0, ReplicationMode.STANDALONE),
    ],
)
def test_the_mode_says_whether_commits_wait_for_a_standby(
    names: str, commit: str, standbys: int, mode: ReplicationMode
) -> None:
    assert replication_mode(server(names, commit, standbys)) is mode


@pytest.mark.parametrize(
    ("current", "raised"),
    [
        ("off", "remote_write"),
        ("local", "remote_write"),
        ("remote_write", None),
        ("on", None),
        ("remote_apply", None),
        ("something new", "remote_write"),
    ],
)
def test_guarded_writes_ask_for_at_least_remote_write(current: str, raised: str | None) -> None:
    assert raised_commit_level(current) == raised


def test_a_standby_is_refused_and_asynchronous_standbys_only_when_required() -> None:
    with pytest.raises(ReadOnlyServer, match="standby"):
        check_server(server(in_recovery=True), require_synchronous=False)
    check_server(server(standbys=1), require_synchronous=False)
    with pytest.raises(SynchronousReplicationRequired, match="require_synchronous_replication"):
        check_server(server(standbys=1), require_synchronous=True)
    check_server(server("s1", standbys=1), require_synchronous=True)
    check_server(server(), require_synchronous=True)  # no standby: no failover to lose to


def test_a_server_whose_transactions_are_read_only_by_default_is_refused_as_a_standby_is() -> None:
    # default_transaction_read_only = on (for the server, the database or the role): every
    # write would fail with ReadOnlySqlTransaction, so the daemon and the commands that write
    # refuse it up front, as they refuse a standby.
    read_only = ServerReplication(
        in_recovery=False, timeline=1, synchronous_standby_names="", synchronous_commit="on",
        standbys=0, synchronous_standbys=0, read_only=True,
    )  # fmt: skip

    with pytest.raises(ReadOnlyServer, match="default_transaction_read_only"):
        check_server(read_only, require_synchronous=False)
    with pytest.raises(ReadOnlyServer, match="takes no writes"):
        require_writable(read_only)
    require_writable(server())  # a writable one passes

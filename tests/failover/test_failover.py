"""PostgreSQL failover: a primary and a streaming standby built here (tests/failover/cluster.py),
the standby promoted under a draining daemon. The short runs; `make chaos` runs the long ones
(tests/failover/runner.py) and prints the rows of docs/evidence.md."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from effectusd.backends.postgres.replication import ReplicationWatch
from effectusd.client import Client
from effectusd.config import Config, ConfigError
from effectusd.core.replication import ASYNCHRONOUS_WARNING, ReadOnlyServer, ReplicationMode
from effectusd.dispatcher.daemon import Daemon
from tests.chaos import runner as chaos
from tests.chaos.scenarios import Scenario
from tests.failover import cluster
from tests.failover.runner import SHORT, run_failover
from tests.support.required import missing
from tests.support.tokens import TOKEN_SPAN  # timeline T's tokens are above (T - 1) * 2^36

pytestmark = pytest.mark.postgres


@pytest.fixture(autouse=True, scope="module")
def _can_build_a_cluster() -> None:
    """Skipped locally where no cluster can be built; in CI that fails (tests/support/required)."""
    why = cluster.available()
    if why is not None:
        missing(why)


ACQUIRE = "SELECT effectus_acquire_fence(%s, %s, gen_random_uuid(), %s)"


@pytest.fixture(scope="module")
def asynchronous() -> Iterator[cluster.Pair]:
    """An asynchronous pair with a migrated database; tests here do not fail it over."""
    with cluster.pair(synchronous=False) as pair:
        pair.create_database("effectusd")
        chaos._migrate(pair.url("effectusd"))
        pair.wait_replayed()
        yield pair


def _grant(url: str, resource: str, dispatch_id: int) -> int:
    """One fencing token, the previous lease already expired (each grant a new holder)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE effectus_fencing_leases SET expires_at = now() - interval '1 second'")
        row = conn.execute(
            ACQUIRE, (resource, dispatch_id, datetime.now(UTC) + timedelta(minutes=1))
        ).fetchone()
    assert row is not None and row[0] is not None
    return int(row[0])


@pytest.mark.chaos
@pytest.mark.parametrize("scenario", SHORT, ids=[s.failover for s in SHORT])
def test_sagas_drain_through_a_failover_with_no_duplicate_and_fencing_tokens_only_rising(
    scenario: Scenario,
) -> None:
    report = run_failover(scenario)
    assert not report.violations, report
    assert report.lost == 0 and report.duplicates == 0 and report.fence_violations == 0
    assert report.mode_before == scenario.failover
    assert report.wait_result in ("completed", "compensated", "failed", "blocked_unknown")
    if scenario.failover == "synchronous":
        assert report.at_most_once_resent == 0
        assert not report.warned
    else:
        assert report.warned
        assert report.lost_commits > 0, "the standby missed nothing: the run proves nothing"


def test_tokens_after_a_failover_are_above_those_the_old_primary_granted_and_lost() -> None:
    with cluster.pair(synchronous=False) as pair:
        pair.create_database("effectusd")
        url = pair.url("effectusd")
        chaos._migrate(url)
        replicated = _grant(url, "account:a", 1)
        pair.wait_replayed()
        pair.stall_replication()
        lost = [_grant(url, "account:a", 2 + n) for n in range(3)]  # never reach the standby
        pair.fail_over()
        after = _grant(url, "account:a", 9)

    assert replicated < lost[0] < lost[1] < lost[2] < after
    # the first grants on timeline 1, the one after the failover on timeline 2
    assert replicated < TOKEN_SPAN < after < 2 * TOKEN_SPAN


def test_a_two_host_url_finds_the_primary_whichever_host_comes_first(
    asynchronous: cluster.Pair,
) -> None:
    standby_first = (
        f"postgresql://postgres@127.0.0.1:{asynchronous.standby_port},"
        f"127.0.0.1:{asynchronous.primary_port}/effectusd"
    )
    client = Client(Config(), database_url=standby_first)
    assert client.list() == []
    with client.backend.runner.connect() as conn:
        [(in_recovery,)] = conn.execute("SELECT pg_is_in_recovery()").fetchall()
    assert in_recovery is False


def test_the_daemon_refuses_a_standby(asynchronous: cluster.Pair) -> None:
    only_standby = asynchronous.admin_url(asynchronous.standby_port, "effectusd")
    with pytest.raises(ConfigError, match="standby in recovery"):
        Daemon(Config(), only_standby).check_startup()


@pytest.mark.parametrize(
    "command",
    [
        ["migrate"],
        ["resolve", "0" * 64, "charge", "--committed", "--evidence", "seen"],
        ["retry", "0" * 64],
        ["cancel", "0" * 64],
        ["prune", "--older-than", "1d"],
    ],
    ids=["migrate", "resolve", "retry", "cancel", "prune"],
)
def test_a_command_that_writes_refuses_a_standby_in_the_daemons_one_line(
    asynchronous: cluster.Pair, command: list[str]
) -> None:
    from click.testing import CliRunner

    from effectusd.cli import main

    only_standby = asynchronous.admin_url(asynchronous.standby_port, "effectusd")
    with pytest.raises(ConfigError) as daemon:
        Daemon(Config(), only_standby).check_startup()

    result = CliRunner().invoke(
        main,
        ["--database-url", only_standby, *command],
        env={"EFFECTUSD_CONFIG": None, "EFFECTUSD_DATABASE_URL": None},
    )

    assert result.exit_code == 3, result.output
    assert result.stderr.strip().splitlines() == [f"error: {daemon.value}"]
    assert "ReadOnlySqlTransaction" not in result.output


def test_require_synchronous_replication_refuses_an_asynchronous_standby_at_start(
    asynchronous: cluster.Pair,
) -> None:
    url = asynchronous.url("effectusd")
    Daemon(Config(), url).check_startup()  # off (the default): it warns and runs
    strict = Config()
    strict.database.require_synchronous_replication = True
    with pytest.raises(ConfigError, match="require_synchronous_replication"):
        Daemon(strict, url).check_startup()


async def test_a_connection_to_a_standby_is_refused_and_a_primary_one_waits_for_its_standby(
    asynchronous: cluster.Pair,
) -> None:
    watch = ReplicationWatch(require_synchronous=False)
    standby = asynchronous.admin_url(asynchronous.standby_port, "effectusd")
    async with await psycopg.AsyncConnection.connect(standby, autocommit=True) as conn:
        with pytest.raises(ReadOnlyServer):
            await watch.connected(conn)
    assert watch.report() == {"mode": "unknown", "refused": 1}

    local = asynchronous.admin_url(asynchronous.primary_port, "effectusd")
    local += "?options=-c%20synchronous_commit%3Dlocal"
    async with await psycopg.AsyncConnection.connect(local, autocommit=True) as conn:
        server = await watch.connected(conn)
        shown = await (await conn.execute("SHOW synchronous_commit")).fetchone()
    assert shown == ("remote_write",)
    assert server.mode is ReplicationMode.ASYNCHRONOUS and server.timeline == 1
    report = watch.report()
    assert report["mode"] == "asynchronous" and report["standbys"] == 1
    assert report["warning"] == ASYNCHRONOUS_WARNING
    assert report["connections_opened"] == 1 and report["connections_refused"] == 1

"""`effectusd bench`: the claim-latency backlog, the soak, and the numbers they report.

Small sizes only: these check that the measurements measure what they say, not how fast
anything is.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import psycopg
import pytest

from effectusd.backends.postgres import database_name
from effectusd.bench import (
    CLAIM_MIN_SAMPLES,
    build_backlog,
    claim_params,
    time_claims,
)
from effectusd.bench.database import drop_database, scratch_database
from effectusd.bench.measures import DatabaseCpu
from tests.conftest import ADMIN_URL
from tests.support.harness import fetch, make_config

pytestmark = pytest.mark.postgres

COUNTS = """
SELECT (SELECT count(*) FROM effectus_saga_instances WHERE state = 'running') AS sagas,
       (SELECT count(*) FROM effectus_saga_steps) AS steps,
       (SELECT count(*) FROM effectus_saga_outbox WHERE state = 'queued') AS queued,
       (SELECT count(*) FROM effectus_saga_outbox) AS outbox,
       (SELECT count(*) FROM effectus_saga_attempts) AS attempts,
       (SELECT count(*) FROM effectus_saga_events) AS events
"""


def bench(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "effectusd.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_claim_is_timed_with_the_daemons_parameters() -> None:
    config = make_config(
        "http://127.0.0.1:9",
        {"pay": {}},
        dispatcher={"concurrency": 8, "lease_margin": "7s"},
    )  # destination "dest" allows 16 at once; the daemon's total of 8 is the tighter limit

    params = claim_params(config)

    assert params["destinations"] == ["dest"]
    assert params["limits"] == [8]
    assert params["total"] == 8
    assert params["margin_s"] == 7.0
    assert params["write_ahead"] is True
    assert params["owner"].count(":") == 2  # host:pid:random, as a daemon's own


def test_the_backlog_is_ready_work_and_timed_claims_leave_it_ready(db: str) -> None:
    config = make_config("http://127.0.0.1:9", {"pay": {}})
    progress: list[str] = []
    with psycopg.connect(db, autocommit=True) as conn:
        build_backlog(conn, config, range(1, 1001), 1000, progress.append)
        params = claim_params(config)

        timings = time_claims(conn, params, 16, "1,000 ready rows", progress.append)

    assert len(timings) >= CLAIM_MIN_SAMPLES and all(ms > 0 for ms in timings)
    [counts] = fetch(db, COUNTS)
    assert counts == {
        "sagas": 1000,
        "steps": 0,  # as submits write them: none (migration 10018)
        "queued": 1000,
        "outbox": 1000,
        "attempts": 0,  # every claim was rolled back: nothing was opened or logged
        "events": 0,
    }
    [row] = fetch(db, "SELECT count(DISTINCT idempotency_key) AS keys FROM effectus_saga_outbox")
    assert row["keys"] == 1000
    assert progress[0].startswith("backlog: 1,000/1,000 ready rows (")
    assert progress[-1].startswith("claim latency over 1,000 ready rows: ")


def test_a_claim_that_claims_nothing_is_refused_as_a_measurement(db: str) -> None:
    config = make_config("http://127.0.0.1:9", {"pay": {}})
    with psycopg.connect(db, autocommit=True) as conn:
        with pytest.raises(RuntimeError, match=r"claimed 0 row\(s\) over nothing, expected 16"):
            time_claims(conn, claim_params(config), 16, "nothing", lambda _: None)


def test_bench_reports_claim_latency_and_the_soak(database_url: str) -> None:
    result = bench(
        "--database-url", ADMIN_URL, "bench", "--sagas", "20", "--steps", "2",
        "--concurrency", "4", "--backlog", "300", "--duration", "3s", "--json",
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    assert report["completed"] == 20 and report["backlog"] == 300
    assert (
        0 < report["idle_enqueue_to_dispatch_p50_ms"] <= report["idle_enqueue_to_dispatch_p99_ms"]
    )
    claims = {key: value for key, value in report.items() if key.startswith("claim_p")}
    assert set(claims) == {
        f"claim_p{pct}_ms_{label}" for pct in (50, 99) for label in ("empty", "batch", "backlog")
    }
    assert all(value > 0 for value in claims.values())
    assert report["claim_backlog_ratio_p99"] == pytest.approx(
        report["claim_p99_ms_backlog"] / report["claim_p99_ms_empty"], rel=0.02
    )
    assert 0 < report["drain_rss_mb_start"] <= report["drain_rss_mb_max"]
    assert report["drain_rss_mb_minute"] is None  # the drain took less than a minute
    # the bench's own sink is read around the drain (in clock ticks: a short drain may be 0)
    assert report["sink_cpu_us_per_step"] >= 0
    assert report["soak_seconds"] >= 3 and report["soak_steps_per_s"] > 0
    assert report["soak_running_sagas_end"] >= 0
    assert 0 < report["rss_mb_start"] <= report["rss_mb_max"]
    assert report["rss_mb_start"] <= report["rss_mb_max"] >= report["rss_mb_end"] > 0
    assert "backlog: 300/300 ready rows" in result.stderr
    assert "soak: " in result.stderr


def test_bench_without_backlog_or_soak_leaves_those_fields_out_of_the_text(
    database_url: str,
) -> None:
    result = bench(
        "--database-url", ADMIN_URL, "bench", "--sagas", "5", "--steps", "1",
        "--concurrency", "2", "--backlog", "0",
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    keys = [line.split()[0] for line in result.stdout.splitlines()]
    assert "steps_per_s" in keys and "rss_mb" in keys
    assert not [key for key in keys if key.startswith(("claim_", "soak_", "rss_mb_"))]
    assert "backlog:" not in result.stderr


def test_bench_with_two_processes_drains_every_saga_and_reports_the_database_load(
    database_url: str,
) -> None:
    result = bench(
        "--database-url", ADMIN_URL, "bench", "--sagas", "30", "--steps", "2",
        "--concurrency", "2", "--backlog", "0", "--processes", "2", "--json",
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    assert report["processes"] == 2 and report["completed"] == 30
    # each step writes at least its attempt row, settles it and moves its outbox row twice
    assert report["rows_written_per_step"] >= 4
    assert report["drain_rss_mb_max"] is None  # sampled only for a drain in this process
    assert report["cpu_us_per_step"] > 0 and report["commits_per_s"] > 0
    assert report["wal_bytes_per_s"] > 0
    assert "in 2 processes" in result.stderr


def test_bench_with_two_stores_completes_every_saga_of_both_and_reports_their_connections(
    database_url: str,
) -> None:
    result = bench(
        "--database-url", ADMIN_URL, "bench", "--stores", "2", "--sagas", "20", "--steps", "2",
        "--concurrency", "4", "--backlog", "0", "--json",
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    assert report["stores"] == 2 and report["processes"] == 1
    assert report["completed_per_store"] == [10, 10] and report["completed"] == 20
    assert report["steps"] == 40
    # every store's database was served by the one daemon: its pool and listener, at least
    [east, west] = report["connections_per_store"]
    assert east >= 2 and west >= 2
    # each step writes at least its attempt row, settles it and moves its outbox row twice,
    # and commits at least its write-ahead and its outcome: summed over both databases
    assert report["rows_written_per_step"] >= 4 and report["commits_per_step"] >= 2
    assert report["cpu_us_per_step"] > 0 and report["db_cpu_us_per_step"] > 0
    assert report["wal_bytes_per_step"] > 0 and report["steps_per_s"] > 0
    assert report["idle_enqueue_to_dispatch_p50_ms"] > 0
    assert "into 2 store(s)" in result.stderr


def test_bench_refuses_several_stores_with_several_processes() -> None:
    result = bench(
        "--database-url", ADMIN_URL, "bench", "--stores", "2", "--processes", "2",
        "--backlog", "0",
    )  # fmt: skip

    assert result.returncode == 2
    assert "--stores above 1 is benched in one process" in result.stderr


def test_bench_refuses_a_database_url_that_is_not_postgresql() -> None:
    result = bench("--database-url", "sqlite:///bench.db", "bench", "--backlog", "0")

    assert result.returncode == 3
    assert "bench (it makes scratch databases on the server) needs PostgreSQL" in result.stderr


def test_database_cpu_counts_the_backends_of_its_own_database_only(empty_database: str) -> None:
    # The bench's DB µs per step: the whole server's CPU also counted other databases'
    # backends and checkpoints, and swung by half between identical runs.
    work = "SELECT count(*) FROM generate_series(1, 3000000)"
    name = empty_database.rsplit("/", 1)[1]
    with psycopg.connect(empty_database) as ours, psycopg.connect(ADMIN_URL) as theirs:
        with DatabaseCpu(name) as elsewhere:
            theirs.execute(work).fetchone()
        with DatabaseCpu(name) as here:
            ours.execute(work).fetchone()
    assert here.seconds is not None and elsewhere.seconds is not None  # our backend was seen
    assert here.seconds >= 0.05
    assert elsewhere.seconds < here.seconds / 4


def test_database_cpu_counts_a_backend_that_starts_while_it_samples(empty_database: str) -> None:
    # The sampler reads a process's title once and remembers it: a backend forked while it
    # runs (a pool growing) must still be found and counted, not remembered as someone else.
    name = empty_database.rsplit("/", 1)[1]
    with DatabaseCpu(name) as meter:
        before = set(meter.last)
        with psycopg.connect(empty_database) as late:
            late.execute("SELECT count(*) FROM generate_series(1, 3000000)").fetchone()
            pid = late.info.backend_pid
    assert pid not in before
    assert pid in meter.last
    assert meter.seconds is not None and meter.seconds >= 0.05


def test_database_cpu_counts_each_databases_backends_apart(empty_database: str) -> None:
    # `bench --stores N` reads every store's database with one sampler: the CPU of all, the
    # connections of each.
    other = scratch_database(ADMIN_URL)
    try:
        names = [database_name(empty_database), database_name(other)]
        with (
            psycopg.connect(empty_database) as first,
            psycopg.connect(other) as second,
            psycopg.connect(other) as third,
            DatabaseCpu(*names) as meter,
        ):
            for conn in (first, second, third):
                conn.execute("SELECT count(*) FROM generate_series(1, 1000000)").fetchone()
    finally:
        drop_database(ADMIN_URL, other)
    assert meter.backends() == [1, 2]
    assert meter.seconds is not None and meter.seconds > 0


def test_database_cpu_is_none_when_no_backend_of_the_database_is_seen() -> None:
    with DatabaseCpu("effectusd_no_such_database") as meter:
        pass
    assert meter.seconds is None and meter.backends() is None

"""`make bench-peers`: the table and the JSON it makes of one run's readings (the runs
themselves need the peers extra and a server; this is what is printed from them)."""

from __future__ import annotations

from dataclasses import MISSING, fields, replace
from typing import Any

from effectusd.bench import BenchResult
from effectusd.bench.measures import PeerResult
from effectusd.bench.peers import Comparison


def _bench(**values: Any) -> BenchResult:
    required: dict[str, Any] = {
        f.name: 1
        for f in fields(BenchResult)
        if f.default is MISSING and f.default_factory is MISSING
    }
    return replace(BenchResult(**{**required, "transport": "aiohttp"}), **values)


def _comparison() -> Comparison:
    return Comparison(
        concurrency=32,
        pgqueuer_jobs_per_s=2000.0,
        pgqueuer_runs=[1800.0, 2200.0],
        pgqueuer_cpu_us_per_job=300.0,
        pgqueuer_db_cpu_us_per_job=150.0,
        pgqueuer_wal_bytes_per_job=1500.0,
        pgqueuer_rows_written_per_job=4.0,
        effectusd={
            5: _bench(
                steps_per_s=1200.0,
                bare_calls_per_s=6000.0,
                rows_written_per_step=8.8,
                sink_cpu_us_per_step=25.0,
            ),
            1: _bench(
                steps_per_s=1400.0,
                bare_calls_per_s=4000.0,
                rows_written_per_step=8.0,
                sink_cpu_us_per_step=None,
            ),
        },
        pgqueuer_sink_cpu_us_per_job=14.0,
    )


def test_the_ratio_is_effectusds_rate_over_the_mean_of_pgqueuers_runs() -> None:
    comparison = _comparison()
    assert comparison.ratio(5) == 0.6 and comparison.ratio(1) == 0.7


def test_the_peers_efficiency_is_over_the_mean_of_the_bare_loops_measured_in_the_run() -> None:
    assert _comparison().pgqueuer_efficiency == 0.4  # 2,000 / mean(6,000, 4,000)


def test_the_table_shows_each_sides_cost_per_unit_beside_its_rate() -> None:
    lines = _comparison().table().splitlines()
    header = next(line for line in lines if line.startswith("what"))
    assert header.split()[1:7] == ["rate/s", "ratio", "CPU", "µs", "DB", "µs"]
    assert "WAL B" in header and header.split()[-4:] == ["rows", "sink", "µs", "notes"]
    peer = next(line for line in lines if line.startswith("pgqueuer"))
    assert peer.split()[6:13] == ["2000", "1.00", "300", "150", "1500", "4.0", "14"]
    assert "runs 1800 / 2200" in peer and "efficiency 0.4" in peer
    five = next(line for line in lines if line.startswith("effectusd, 5-step"))
    assert five.split()[3:5] == ["1200", "0.60"] and five.split()[8:10] == ["8.8", "25"]
    one = next(line for line in lines if line.startswith("effectusd, 1-step"))
    assert one.split()[8:10] == ["8.0", "n/a"]  # not measured: said so, not zero


def test_the_json_carries_the_same_readings() -> None:
    report = _comparison().as_json()
    assert report["ratios"] == {"5": 0.6, "1": 0.7}
    assert report["pgqueuer_rows_written_per_job"] == 4.0
    assert report["pgqueuer_wal_bytes_per_job"] == 1500.0
    assert report["pgqueuer_efficiency"] == 0.4
    assert report["effectusd"]["5"]["rows_written_per_step"] == 8.8
    assert report["pgqueuer_sink_cpu_us_per_job"] == 14.0
    assert report["effectusd"]["5"]["sink_cpu_us_per_step"] == 25.0


def _dbos() -> PeerResult:
    # 2,000 steps in 2.5 s, 1.6 s of the process's CPU, 0.8 s of its database's backends
    return PeerResult.of(2000, 32, 2.5, 1.6, 0.8, 3_000_000, 5000)


def test_a_peers_totals_become_rates_and_costs_per_unit() -> None:
    assert _dbos() == PeerResult(2000, 32, 2.5, 800.0, 800.0, 400.0, 1500.0, 2.5)
    assert PeerResult.of(10, 1, 1.0, 0.1, None, 0, 0).db_cpu_us_per_unit is None
    assert _dbos().sink_cpu_us_per_unit is None  # the sink's CPU not read: not measured
    assert PeerResult.of(2000, 32, 2.5, 1.6, 0.8, 0, 0, 0.03).sink_cpu_us_per_unit == 15.0


def test_the_dbos_row_and_effectusds_ratio_to_it() -> None:
    comparison = replace(_comparison(), dbos=_dbos())
    assert comparison.dbos_ratio(5) == 1.5 and comparison.dbos_ratio(1) == 1.75
    lines = comparison.table().splitlines()
    dbos = next(line for line in lines if line.startswith("DBOS"))
    assert dbos.split()[5:13] == ["800", "0.40", "800", "400", "1500", "2.5", "n/a", "2000"]
    five = next(line for line in lines if line.startswith("effectusd, 5-step"))
    assert "DBOS ratio 1.5," in five
    report = comparison.as_json()
    assert report["ratios_to_dbos"] == {"5": 1.5, "1": 1.75}
    assert report["dbos"]["units_per_s"] == 800.0


def test_without_dbos_there_is_no_row_and_no_ratio_to_it() -> None:
    comparison = _comparison()
    assert comparison.dbos_ratio(5) is None
    assert not any(line.startswith("DBOS") for line in comparison.table().splitlines())
    assert "DBOS ratio" not in comparison.table()
    assert comparison.as_json()["dbos"] is None


def test_the_table_and_the_json_name_the_delivery_effectusds_steps_had() -> None:
    comparison = replace(_comparison(), delivery="at_least_once")
    assert "its steps at_least_once" in comparison.table().splitlines()[0]
    assert comparison.as_json()["delivery"] == "at_least_once"
    assert "its steps at_most_once" in _comparison().table().splitlines()[0]


def _chains() -> PeerResult:
    # 5,000 chained jobs in 5 s: 1.5 s of the process's CPU, 1 s of its database's backends
    return PeerResult.of(5000, 32, 5.0, 1.5, 1.0, 11_000_000, 28_000)


def test_the_chains_row_and_the_ratio_of_plans_as_long_as_a_chain() -> None:
    comparison = replace(_comparison(), chains=_chains(), chain=5)
    assert comparison.chain_ratio(5) == 1.2  # 1,200 steps/s over 1,000 jobs/s
    assert comparison.chain_ratio(1) is None  # a one-step saga is no chain of five
    lines = comparison.table().splitlines()
    row = next(line for line in lines if line.startswith("pgqueuer, 5-job chains"))
    assert row.split()[3:9] == ["1000", "0.50", "300", "200", "2200", "5.6"]
    five = next(line for line in lines if line.startswith("effectusd, 5-step"))
    assert "chains ratio 1.2," in five
    one = next(line for line in lines if line.startswith("effectusd, 1-step"))
    assert "chains ratio" not in one
    report = comparison.as_json()
    assert report["ratios_to_chains"] == {"5": 1.2, "1": None}
    assert report["chain"] == 5 and report["pgqueuer_chains"]["units_per_s"] == 1000.0


def test_without_chains_there_is_no_row_and_no_ratio_to_them() -> None:
    comparison = _comparison()
    assert comparison.chain_ratio(5) is None
    assert "chains" not in comparison.table()
    assert comparison.as_json()["pgqueuer_chains"] is None

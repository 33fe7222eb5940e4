"""`bench --stores N`: how the sagas are dealt among the stores, which stores the bench makes,
and the per-step figures a drain's totals give."""

from __future__ import annotations

import pytest

from effectusd.bench.fleet import bench_stores, split_sagas, store_config
from effectusd.bench.measures import DrainTotals
from effectusd.config import parse_config
from effectusd.core.stores import store_conflicts


@pytest.mark.parametrize(
    ("sagas", "stores", "split"),
    [
        (1000, 1, [1000]),
        (1000, 2, [500, 500]),
        (1000, 4, [250, 250, 250, 250]),
        (10, 4, [3, 3, 2, 2]),  # the remainder goes one each to the first stores
        (3, 4, [1, 1, 1, 0]),
    ],
)
def test_the_sagas_are_split_evenly_and_every_one_is_dealt(
    sagas: int, stores: int, split: list[int]
) -> None:
    assert split_sagas(sagas, stores) == split
    assert sum(split) == sagas


def test_no_stores_is_refused() -> None:
    with pytest.raises(ValueError, match="stores"):
        split_sagas(10, 0)


def test_one_url_is_todays_single_store_with_the_configured_namespace() -> None:
    [store] = bench_stores(["postgresql://h/a"], "default")
    assert (store.label, store.url, store.namespace) == (None, "postgresql://h/a", "default")


def test_several_urls_are_labelled_stores_that_a_configuration_accepts_together() -> None:
    urls = [f"postgresql://h/bench_{index}" for index in range(4)]
    stores = bench_stores(urls, "default")

    assert [store.label for store in stores] == ["s0", "s1", "s2", "s3"]
    assert [store.url for store in stores] == urls
    assert len({store.namespace for store in stores}) == 4  # one namespace each
    assert store_conflicts({s.label: (s.url, s.namespace) for s in stores if s.label}) == []


def test_a_stores_submitter_holds_its_namespace_and_the_bench_config_is_untouched() -> None:
    config = parse_config({})
    store = bench_stores(["postgresql://h/a", "postgresql://h/b"], config.namespace)[1]

    assert store_config(config, store).namespace == "default-s1"
    assert config.namespace == "default"


def test_per_step_figures_divide_the_drains_totals() -> None:
    totals = DrainTotals(
        steps=5000,
        seconds=4.0,
        cpu_s=1.5,
        db_cpu_s=0.75,
        wal_bytes=20_000_000,
        commits=13_000,
        rows_written=25_500,
    )

    assert totals.steps_per_s() == 1250.0
    assert totals.cpu_us_per_step() == 300.0
    assert totals.db_cpu_us_per_step() == 150.0
    assert totals.wal_bytes_per_step() == 4000.0
    assert totals.commits_per_step() == 2.6
    assert totals.rows_written_per_step() == 5.1
    assert totals.commits_per_s() == 3250.0
    assert totals.wal_bytes_per_s() == 5_000_000


def test_database_cpu_per_step_is_none_when_the_server_is_elsewhere() -> None:
    totals = DrainTotals(
        steps=10, seconds=1.0, cpu_s=0.1, db_cpu_s=None, wal_bytes=0, commits=0, rows_written=0
    )
    assert totals.db_cpu_us_per_step() is None

"""Several stores in one configuration, on real PostgreSQL databases: `migrate` migrates each
and names the one it could not, `run --store` serves one store, and the
operator's commands see every store, each saga with its store's label; a store that is down
is named and the others still answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result

from effectusd.cli import main
from effectusd.client import Client
from effectusd.config import Config
from tests.conftest import create_database, drop_database
from tests.integration.test_operator import UNKNOWN, answer
from tests.support import backends
from tests.support.destination import running
from tests.support.harness import (
    fetch,
    make_config,
    run_until_idle,
    serial_plan,
    write_config_file,
)

pytestmark = pytest.mark.postgres

SECRET = "pa55word-never-shown"
# a server that refuses connections at once; its password must never be printed
DOWN = f"postgresql://postgres:{SECRET}@127.0.0.1:1/effectusd"
NAMESPACES = {"east": "tenant-east", "west": "tenant-west", "down": "tenant-down"}


@pytest.fixture
def two_stores() -> Iterator[dict[str, str]]:
    """Two migrated databases, by label."""
    urls = {label: create_database(f"effectusd_store_{label}") for label in ("east", "west")}
    for url in urls.values():
        with psycopg.connect(url, autocommit=True) as conn:
            backends.migrate(conn)
    yield urls
    for url in urls.values():
        drop_database(url)


def stores_file(tmp_path: Path, config: Config, urls: dict[str, str]) -> Path:
    """The TOML file of ``config`` with ``[database.stores.LABEL]`` for each of ``urls``."""
    folder = tmp_path / "-".join(urls)
    folder.mkdir(exist_ok=True)
    path = write_config_file(folder, config)
    tables = [
        f'[database.stores.{label}]\nurl = "{url}"\nnamespace = "{NAMESPACES[label]}"'
        for label, url in urls.items()
    ]
    path.write_text(path.read_text() + "\n".join(tables) + "\n")
    return path


def cli(config: Path, *args: str) -> Result:
    env = {"EFFECTUSD_CONFIG": None, "EFFECTUSD_DATABASE_URL": None}
    result = CliRunner().invoke(main, ["--config", str(config), *args], env=env)
    assert SECRET not in result.output
    return result


def client(config: Config, url: str, label: str) -> Client:
    """The application's client of one store: its own database and namespace."""
    return Client(config.model_copy(update={"namespace": NAMESPACES[label]}), database_url=url)


def submit(config: Config, url: str, label: str, execution_id: str, plan: str = "p") -> str:
    plan_body = serial_plan(plan, ["do"])
    return client(config, url, label).submit(plan_body, execution_id=execution_id).saga_id


def state(url: str, saga: str) -> str:
    [row] = fetch(url, "SELECT state FROM effectus_saga_instances WHERE saga_id = %s", saga)
    return str(row["state"])


CONFIG = make_config("http://127.0.0.1:9", {"do": {}})


# -- migrate ------------------------------------------------------------------------------------


def test_migrate_migrates_every_store_and_names_the_one_it_could_not_reach(
    tmp_path: Path,
) -> None:
    urls = {label: create_database(f"effectusd_store_{label}") for label in ("east", "west")}
    try:
        live = stores_file(tmp_path, CONFIG, {"east": urls["east"], "down": DOWN, **urls})

        result = cli(live, "migrate")

        assert result.exit_code == 1, result.output
        assert "store east:\n  applied 10001_" in result.stdout
        assert "store west:\n  applied 10001_" in result.stdout
        assert "store down:\n  error: cannot connect to the database" in result.stdout
        assert "migrating failed in store(s) down" in result.stderr
        for label in ("east", "west"):
            check = cli(live, "migrate", "--check", "--store", label)
            assert check.exit_code == 0, check.output
            assert "pending: none" in check.stdout
        data = json.loads(cli(live, "migrate", "--json").stdout)
        assert data["ok"] is False
        assert data["stores"]["east"] == {"ok": True, "applied": []}
        assert data["stores"]["down"]["ok"] is False
        assert "127.0.0.1" not in result.output + data["stores"]["down"]["error"]
    finally:
        for url in urls.values():
            drop_database(url)


# -- run: every store, or the one --store names (tests/integration/test_fleet.py: every store) ---


def test_run_store_with_a_label_no_table_names_is_a_usage_error(
    two_stores: dict[str, str], tmp_path: Path
) -> None:
    live = stores_file(tmp_path, CONFIG, two_stores)

    unknown = cli(live, "run", "--store", "north", "--until-idle")

    assert unknown.exit_code == 2 and "--store north: no such store; stores: east, west" in (
        unknown.stderr
    )


def test_run_store_serves_that_store_alone_also_from_several_processes(
    two_stores: dict[str, str], tmp_path: Path
) -> None:
    with running() as dest:
        config = make_config(dest.base_url, {"do": {}})
        east = submit(config, two_stores["east"], "east", "order-7")
        west = submit(config, two_stores["west"], "west", "order-7")
        live = stores_file(tmp_path, config, two_stores)
        command = [sys.executable, "-m", "effectusd.cli", "--config", str(live), "run"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("EFFECTUSD_")}

        done = subprocess.run(
            [*command, "--store", "west", "--until-idle", "--processes", "2"],
            env=env,
            capture_output=True,
            timeout=120,
        )

        assert done.returncode == 0, done.stderr.decode()
        assert SECRET not in done.stderr.decode()
        assert state(two_stores["west"], west) == "completed"
        assert state(two_stores["east"], east) == "running"
        keys = [request.key for request in dest.requests]
        assert len(keys) == 1  # only west's order-7, under west's namespace
        [west_row] = fetch(two_stores["west"], "SELECT idempotency_key FROM effectus_saga_outbox")
        assert keys == [west_row["idempotency_key"]]


# -- the operator's view ------------------------------------------------------------------------


def test_sagas_list_shows_every_store_newest_first_with_its_label(
    two_stores: dict[str, str], tmp_path: Path
) -> None:
    first = submit(CONFIG, two_stores["east"], "east", "e-1")
    second = submit(CONFIG, two_stores["west"], "west", "w-1")
    third = submit(CONFIG, two_stores["east"], "east", "e-2")
    live = stores_file(tmp_path, CONFIG, two_stores)

    listed = cli(live, "sagas", "list", "--json")
    text = cli(live, "sagas", "list")
    west_only = cli(live, "sagas", "list", "--store", "west", "--json")
    newest = cli(live, "sagas", "list", "--limit", "1", "--json")

    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.stdout)
    assert [(row["store"], row["saga_id"]) for row in rows] == [
        ("east", third),
        ("west", second),
        ("east", first),
    ]
    head, *lines = text.stdout.splitlines()
    assert head.split()[:3] == ["STORE", "SAGA", "STATE"]
    assert [line.split()[0] for line in lines] == ["east", "west", "east"]
    assert [row["saga_id"] for row in json.loads(west_only.stdout)] == [second]
    assert [row["saga_id"] for row in json.loads(newest.stdout)] == [third]


def test_sagas_list_with_a_store_down_lists_the_others_and_names_it(
    two_stores: dict[str, str], tmp_path: Path
) -> None:
    saga = submit(CONFIG, two_stores["east"], "east", "e-1")
    live = stores_file(tmp_path, CONFIG, {"east": two_stores["east"], "down": DOWN})

    result = cli(live, "sagas", "list", "--json")

    assert result.exit_code == 1
    assert [row["saga_id"] for row in json.loads(result.stdout)] == [saga]
    assert "warning: store 'down' could not be read:" in result.stderr
    # the failure's class only: the driver's text names the host, the port, the user
    for part in ("127.0.0.1", "port 1", "postgres", SECRET):
        assert part not in result.stderr


def test_show_and_cancel_find_the_saga_in_whichever_store_holds_it(
    two_stores: dict[str, str], tmp_path: Path
) -> None:
    east = submit(CONFIG, two_stores["east"], "east", "e-1")
    west = submit(CONFIG, two_stores["west"], "west", "w-1")
    prefix = west[:12] if not east.startswith(west[:12]) else west[:20]
    live = stores_file(tmp_path, CONFIG, two_stores)

    shown = cli(live, "sagas", "show", prefix, "--json")
    by_execution = cli(live, "sagas", "show", "--execution-id", "w-1", "--json")
    elsewhere = cli(live, "sagas", "show", prefix, "--store", "east")
    refused = cli(live, "retry", prefix, "--json")
    canceled = cli(live, "cancel", prefix, "--evidence", "tenant asked", "--json")

    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["saga_id"] == west
    assert json.loads(shown.stdout)["namespace"] == NAMESPACES["west"]
    assert json.loads(by_execution.stdout)["saga_id"] == west
    assert elsewhere.exit_code == 5 and f"no saga id starts with {prefix}" in elsewhere.stderr
    assert refused.exit_code == 4  # found in west, and running: nothing to retry
    assert json.loads(refused.stdout)["refused"] == "conflict"
    assert canceled.exit_code == 0, canceled.output
    assert (json.loads(canceled.stdout)["saga_id"], json.loads(canceled.stdout)["store"]) == (
        west,
        "west",
    )
    text = cli(live, "sagas", "show", prefix)
    assert text.stdout.startswith(f"store      west\nsaga       {west}\n")
    assert state(two_stores["west"], west) == "compensated"
    assert state(two_stores["east"], east) == "running"


def test_a_prefix_fitting_sagas_in_two_stores_is_ambiguous_naming_each_label(
    two_stores: dict[str, str], tmp_path: Path
) -> None:
    east = submit(CONFIG, two_stores["east"], "east", "e-1")
    west = next(  # a west saga whose id starts as east's does (1 in 16 do)
        saga
        for n in range(200)
        if (saga := submit(CONFIG, two_stores["west"], "west", f"w-{n}"))[0] == east[0]
    )
    live = stores_file(tmp_path, CONFIG, two_stores)

    shown = cli(live, "sagas", "show", east[0])
    cancel = cli(live, "cancel", east[0], "--json")
    chosen = cli(live, "sagas", "show", east[0], "--store", "east", "--json")

    assert shown.exit_code == 2
    assert "it fits sagas in stores east, west" in shown.stderr
    assert f"  east  {east}" in shown.stderr and f"  west  {west}" in shown.stderr
    assert cancel.exit_code == 2 and json.loads(cancel.stdout)["refused"] == "ambiguous"
    assert state(two_stores["east"], east) == "running"
    assert json.loads(chosen.stdout)["saga_id"] == east


def test_a_saga_in_no_store_reached_names_the_stores_that_could_not_be_searched(
    two_stores: dict[str, str], tmp_path: Path
) -> None:
    live = stores_file(tmp_path, CONFIG, {"east": two_stores["east"], "down": DOWN})
    unknown = "ab" * 32

    shown = cli(live, "sagas", "show", unknown)
    retried = cli(live, "retry", unknown, "--json")
    everywhere = cli(stores_file(tmp_path, CONFIG, two_stores), "cancel", unknown)

    assert shown.exit_code == 1
    assert "not in stores searched (east); store 'down' could not be searched" in shown.stderr
    assert retried.exit_code == 1 and json.loads(retried.stdout)["refused"] == "unreached"
    assert everywhere.exit_code == 5
    assert f"saga {unknown}: in none of the stores (east, west)" in everywhere.stderr


def test_prune_prunes_each_store_and_reports_by_label(
    two_stores: dict[str, str], tmp_path: Path
) -> None:
    sagas = {label: submit(CONFIG, url, label, f"{label}-1") for label, url in two_stores.items()}
    for url in two_stores.values():
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "UPDATE effectus_saga_instances SET state = 'completed',"
                " finished_at = now() - interval '2 days'"
            )
    live = stores_file(tmp_path, CONFIG, two_stores)

    result = cli(live, "prune", "--older-than", "1d", "--json")
    text = cli(live, "prune", "--older-than", "1d")

    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    assert report["ok"] is True and report["unreached"] == {}
    assert {label: each["count"] for label, each in report["stores"].items()} == {
        "east": 1,
        "west": 1,
    }
    for label, url in two_stores.items():
        assert fetch(url, "SELECT saga_id FROM effectus_saga_instances") == []
        tombstones = fetch(url, "SELECT saga_id FROM effectus_saga_tombstones")
        assert [row["saga_id"] for row in tombstones] == [sagas[label]]
    assert "store east:\n  deleted 0 finished saga(s)" in text.stdout
    assert "store west:\n  deleted 0 finished saga(s)" in text.stdout


def test_prune_with_a_store_down_prunes_the_others_and_names_it(
    two_stores: dict[str, str], tmp_path: Path
) -> None:
    live = stores_file(tmp_path, CONFIG, {"east": two_stores["east"], "down": DOWN})

    result = cli(live, "prune", "--older-than", "1d", "--json")

    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert list(report["stores"]) == ["east"] and list(report["unreached"]) == ["down"]
    assert "warning: store 'down' could not be pruned" in result.stderr
    assert "127.0.0.1" not in result.output and "127.0.0.1" not in report["unreached"]["down"]


def test_submit_needs_store_with_several_and_writes_into_its_namespace(
    two_stores: dict[str, str], tmp_path: Path
) -> None:
    live = stores_file(tmp_path, CONFIG, two_stores)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(serial_plan("p", ["do"])))

    unchosen = cli(live, "submit", str(plan), "--execution-id", "o-1")
    chosen = cli(live, "submit", str(plan), "--execution-id", "o-1", "--store", "west", "--json")

    assert unchosen.exit_code == 3
    assert "works on one store and database.stores lists 2 (east, west)" in unchosen.stderr
    assert chosen.exit_code == 0, chosen.output
    saga = json.loads(chosen.stdout)["saga_id"]
    [row] = fetch(two_stores["west"], "SELECT saga_id, namespace FROM effectus_saga_instances")
    assert (row["saga_id"], row["namespace"]) == (saga, NAMESPACES["west"])
    assert fetch(two_stores["east"], "SELECT saga_id FROM effectus_saga_instances") == []


def test_adopt_contract_by_verb_reports_each_store_and_names_one_down(
    two_stores: dict[str, str], tmp_path: Path
) -> None:
    both = stores_file(tmp_path, CONFIG, two_stores)
    one_down = stores_file(tmp_path, CONFIG, {"east": two_stores["east"], "down": DOWN})
    args = ("adopt-contract", "--verb", "do", "--evidence", "contract reviewed", "--json")

    result = cli(both, *args)
    partial = cli(one_down, *args)

    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert sorted(report["stores"]) == ["east", "west"]
    assert all(each["adopted"] == [] for each in report["stores"].values())
    assert partial.exit_code == 1
    assert list(json.loads(partial.stdout)["unreached"]) == ["down"]
    assert "warning: store 'down' could not be searched" in partial.stderr


async def test_resolve_settles_a_blocked_saga_in_the_store_that_holds_it(
    two_stores: dict[str, str], tmp_path: Path
) -> None:
    with running(answer({("s1", "forward", None): UNKNOWN})) as dest:
        config = make_config(dest.base_url, {"do": {}})
        submit(config, two_stores["east"], "east", "e-1")
        west = submit(config, two_stores["west"], "west", "w-1")
        await run_until_idle(config, two_stores["west"])
        assert state(two_stores["west"], west) == "blocked_unknown"
        live = stores_file(tmp_path, config, two_stores)

        result = cli(live, "resolve", west[:16], "s1", "--committed", "--evidence", "seen")

        assert result.exit_code == 0, result.output
        assert "  store     west" in result.stdout
        assert state(two_stores["west"], west) == "completed"


def test_writing_commands_stop_at_a_read_only_store_and_go_on_in_the_others(
    two_stores: dict[str, str], tmp_path: Path
) -> None:
    sagas = {label: submit(CONFIG, url, label, f"{label}-1") for label, url in two_stores.items()}
    name = two_stores["west"].rsplit("/", 1)[1]
    with psycopg.connect(two_stores["west"], autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
    live = stores_file(tmp_path, CONFIG, two_stores)

    migrated = cli(live, "migrate", "--json")
    pruned = cli(live, "prune", "--older-than", "1s", "--json")
    refused = cli(live, "cancel", sagas["west"], "--evidence", "asked")
    listed = cli(live, "sagas", "list", "--json")
    canceled = cli(live, "cancel", sagas["east"], "--evidence", "asked", "--json")

    assert migrated.exit_code == 3, migrated.output
    stores = json.loads(migrated.stdout)["stores"]
    assert stores["east"] == {"ok": True, "applied": []}
    assert "the server takes no writes" in stores["west"]["error"]
    assert pruned.exit_code == 1, pruned.output
    assert list(json.loads(pruned.stdout)["unreached"]) == ["west"]
    assert "warning: store 'west' could not be pruned: database: the server takes no writes" in (
        pruned.stderr
    )
    assert refused.exit_code == 3, refused.output
    assert refused.stderr.startswith("error: database: the server takes no writes")
    assert state(two_stores["west"], sagas["west"]) == "running"
    assert listed.exit_code == 0, listed.output
    assert {row["saga_id"] for row in json.loads(listed.stdout)} == set(sagas.values())
    assert canceled.exit_code == 0, canceled.output
    assert state(two_stores["east"], sagas["east"]) != "running"

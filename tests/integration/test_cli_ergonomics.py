"""What the command line tells an operator when something is off: an unmigrated database,
a database URL no store understands, an option value without its unit, a pruned identity;
and the ways `sagas show` finds a saga (the prefix `sagas list` prints, the execution id)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import psycopg
import pytest

from tests.integration.test_cli_plans_and_sagas import (
    EXAMPLE_PLAN,
    FACTS_JSON,
    VECTOR_SAGA_ID,
    run,
    snapshot,
    submit,
)

pytestmark = pytest.mark.postgres

EVERY_DATABASE_COMMAND = [
    pytest.param(
        ["submit", str(EXAMPLE_PLAN), "--execution-id", "order-7", "--facts", FACTS_JSON],
        id="submit",
    ),
    pytest.param(["sagas", "list"], id="sagas-list"),
    pytest.param(["sagas", "show", VECTOR_SAGA_ID], id="sagas-show"),
    pytest.param(["sagas", "show", VECTOR_SAGA_ID[:12]], id="sagas-show-prefix"),
    pytest.param(["prune", "--older-than", "30d"], id="prune"),
    pytest.param(
        ["resolve", VECTOR_SAGA_ID, "reserve", "--committed", "--evidence", "seen"], id="resolve"
    ),
    pytest.param(["retry", VECTOR_SAGA_ID], id="retry"),
    pytest.param(["cancel", VECTOR_SAGA_ID], id="cancel"),
    pytest.param(["run", "--until-idle"], id="run"),
]


def finish(db: str, saga_id: str, days_ago: int) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "UPDATE effectus_saga_instances SET state = 'completed',"
            " finished_at = now() - make_interval(days => %s) WHERE saga_id = %s",
            (days_ago, saga_id),
        )


# --- an unmigrated database -------------------------------------------------------------------


@pytest.mark.parametrize("command", EVERY_DATABASE_COMMAND)
@pytest.mark.parametrize("kind", ["postgres", "sqlite"])
def test_every_command_on_an_unmigrated_database_exits_6_asking_for_migrate(
    kind: str, command: list[str], empty_database: str, tmp_path: Path
) -> None:
    url = empty_database
    if kind == "sqlite":
        path = tmp_path / "empty.db"
        sqlite3.connect(path).close()  # exists, but holds no table
        url = f"sqlite:///{path}"

    result = run(*command, database_url=url)

    assert result.exit_code == 6, result.output
    assert result.stderr.startswith("error: ") and "run `effectusd migrate`" in result.stderr
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)


# --- database URLs ----------------------------------------------------------------------------


@pytest.mark.parametrize("command", [*EVERY_DATABASE_COMMAND, pytest.param(["migrate"])])
def test_a_database_url_no_store_understands_exits_3_without_repeating_it(
    command: list[str],
) -> None:
    result = run(*command, database_url="mysql://app:hunter2@db.internal/shop")

    assert result.exit_code == 3, result.output
    assert "scheme 'mysql'" in result.stderr and "postgresql://" in result.stderr
    assert "hunter2" not in result.output and "db.internal" not in result.output


# --- config files -----------------------------------------------------------------------------


@pytest.mark.parametrize("command", EVERY_DATABASE_COMMAND)
def test_a_refused_config_file_exits_3_naming_the_file_and_the_key(
    command: list[str], tmp_path: Path
) -> None:
    # ConfigError is an EffectusError now; the command line still answers it as invalid input.
    config = tmp_path / "effectusd.toml"
    config.write_text("[dispatcher]\nconcurency = 8\n")

    result = run(*command, config=config)

    assert result.exit_code == 3, result.output
    assert result.stderr.startswith(f"error: {config}: dispatcher.concurency: ")
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)


# --- durations --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "number"),
    [
        (["prune", "--older-than", "30"], "30"),
        (["prune", "--older-than", "30d", "--keep-tombstones", "90"], "90"),
        (["sagas", "list", "--older-than", " 30 "], "30"),
    ],
)
def test_a_duration_option_without_a_unit_exits_3_naming_the_option_and_the_fix(
    db: str, args: list[str], number: str
) -> None:
    assert submit(db, "order-7").exit_code == 0
    finish(db, VECTOR_SAGA_ID, days_ago=60)
    before = snapshot(db)

    result = run(*args, database_url=db)

    assert result.exit_code == 3, result.output
    option = args[-2]
    assert f"Invalid value for '{option}': a duration needs a unit: " in result.stderr
    assert f'write "{number}s" or "{number}ms" (ms, s, m, h, d)' in result.stderr
    assert snapshot(db) == before  # not 30 seconds: nothing was pruned


@pytest.mark.parametrize(
    "args",
    [
        ["bench", "--duration", "600"],
        ["bench", "--duration", "soon"],
        ["bench", "--duration", "8d"],
        ["prune", "--older-than", "soon"],
    ],
)
def test_a_duration_option_that_is_not_one_exits_3_before_the_command_runs(
    args: list[str],
) -> None:
    result = run(*args, database_url="sqlite:///never-opened.db")

    assert result.exit_code == 3, result.output
    assert f"Invalid value for '{args[-2]}'" in result.stderr
    assert not Path("never-opened.db").exists()


@pytest.mark.parametrize("value", ["2000", '"2000"'])
@pytest.mark.parametrize("command", [["sagas", "list"], ["run", "--until-idle"]])
def test_a_config_duration_without_a_unit_exits_3_naming_the_key_and_the_fix(
    db: str, tmp_path: Path, value: str, command: list[str]
) -> None:
    # lease_margin = 2000 was 2000 seconds, 33 minutes: a file from before says how to mend it.
    config = tmp_path / "effectusd.toml"
    config.write_text(f"[dispatcher]\nlease_margin = {value}\n")

    result = run(*command, database_url=db, config=config)

    assert result.exit_code == 3, result.output
    assert result.stderr == (
        f"error: {config}: dispatcher.lease_margin: a duration needs a unit: "
        'write "2000s" or "2000ms" (ms, s, m, h, d)\n'
    )


@pytest.mark.parametrize("value", ["2000ms", "2s"])
def test_a_config_duration_with_its_unit_is_taken(db: str, tmp_path: Path, value: str) -> None:
    config = tmp_path / "effectusd.toml"
    config.write_text(f'[dispatcher]\nlease_margin = "{value}"\n')

    result = run("run", "--until-idle", database_url=db, config=config)

    assert result.exit_code == 0, result.output


# --- pruning and tombstones -------------------------------------------------------------------


def test_submit_of_a_pruned_identity_exits_4_naming_when_it_finished_and_was_pruned(
    db: str,
) -> None:
    assert submit(db, "order-7").exit_code == 0
    finish(db, VECTOR_SAGA_ID, days_ago=2)
    pruned = run("prune", "--older-than", "1d", "--json", database_url=db)
    assert pruned.exit_code == 0, pruned.output
    report = json.loads(pruned.stdout)
    assert report["count"] == 1 and report["tombstones_deleted"] == 0
    before = snapshot(db)

    result = submit(db, "order-7")

    assert result.exit_code == 4, result.output
    assert VECTOR_SAGA_ID in result.stderr and "finished completed at" in result.stderr
    assert "was pruned at" in result.stderr and "use a new execution id" in result.stderr
    assert snapshot(db) == before

    shown = run("sagas", "show", VECTOR_SAGA_ID, database_url=db)
    assert shown.exit_code == 5 and "was pruned at" in shown.stderr

    # tombstones younger than --keep-tombstones stay; "never" keeps them all
    assert (
        run("prune", "--older-than", "1d", "--keep-tombstones", "1s", database_url=db).exit_code
        == 0
    )
    assert snapshot(db)["effectus_saga_tombstones"][0] == 1
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("UPDATE effectus_saga_tombstones SET pruned_at = now() - interval '40 days'")
    kept = run("prune", "--older-than", "1d", "--keep-tombstones", "never", database_url=db)
    assert kept.exit_code == 0 and "tombstones kept" in kept.stdout
    default = run("prune", "--older-than", "1d", database_url=db)  # 30d by default
    assert default.exit_code == 0 and "deleted 1 tombstone(s)" in default.stdout
    assert submit(db, "order-7").exit_code == 0  # the identity is free again


# --- sagas show: which saga -------------------------------------------------------------------


def test_sagas_show_takes_the_prefix_sagas_list_prints(db: str) -> None:
    assert submit(db, "order-7").exit_code == 0
    listed = run("sagas", "list", database_url=db).stdout.splitlines()[1].split()[0]
    assert listed.endswith("…") and VECTOR_SAGA_ID.startswith(listed[:-1])

    for name in (listed, listed[:-1], VECTOR_SAGA_ID[:4]):
        result = run("sagas", "show", name, "--json", database_url=db)
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["saga_id"] == VECTOR_SAGA_ID

    missing = run("sagas", "show", "ffff", database_url=db)
    assert missing.exit_code == 5 and "no saga id starts with ffff" in missing.stderr
    bad = run("sagas", "show", "order-7", database_url=db)
    assert bad.exit_code == 2 and "SAGA_ID" in bad.stderr


def test_sagas_show_of_an_ambiguous_prefix_exits_2_listing_the_candidates(db: str) -> None:
    ids = []
    for n in range(40):  # 40 ids: some two share their first hex digit
        result = submit(db, f"order-{n}", "--json")
        ids.append(json.loads(result.stdout)["saga_id"])
    first = next(i[0] for i in ids if sum(j[0] == i[0] for j in ids) > 1)
    sharing = sorted(i for i in ids if i[0] == first)

    result = run("sagas", "show", first, database_url=db)

    assert result.exit_code == 2, result.output
    assert f"saga id prefix {first} is ambiguous" in result.stderr
    for saga in sharing[:10]:
        assert saga in result.stderr


def test_sagas_show_by_execution_id_and_plan(db: str, tmp_path: Path) -> None:
    assert submit(db, "order-7").exit_code == 0
    plan = json.loads(EXAMPLE_PLAN.read_text())
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**plan, "plan_id": "checkout-v2"}))
    assert submit(db, "order-7", plan=other).exit_code == 0

    both = run("sagas", "show", "--execution-id", "order-7", database_url=db)
    assert both.exit_code == 2 and "execution id 'order-7' is ambiguous" in both.stderr
    assert "checkout/order-7" in both.stderr and "checkout-v2/order-7" in both.stderr

    one = run(
        "sagas",
        "show",
        "--execution-id",
        "order-7",
        "--plan",
        "checkout",
        "--json",
        database_url=db,
    )
    assert one.exit_code == 0, one.output
    assert json.loads(one.stdout)["saga_id"] == VECTOR_SAGA_ID
    only = run("sagas", "show", "--execution-id", "order-8", database_url=db)
    assert only.exit_code == 5 and "no saga with execution id 'order-8'" in only.stderr

    neither = run("sagas", "show", database_url=db)
    assert neither.exit_code == 2 and "--execution-id" in neither.stderr
    lone_plan = run("sagas", "show", VECTOR_SAGA_ID, "--plan", "checkout", database_url=db)
    assert lone_plan.exit_code == 2 and "--plan goes with --execution-id" in lone_plan.stderr

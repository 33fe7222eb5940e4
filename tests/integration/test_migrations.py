"""Schema migrations against a real PostgreSQL (docs/design.md section 10).

Covers: what the first migration creates, idempotence, status/require_current, refusal of a
database that is newer than the code or whose applied migration changed, `migrate --check`,
the advisory lock under two concurrent migrators, and the schema constraints that guard the
engine's invariants.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql as psql
from psycopg.rows import dict_row

from effectusd.backends.migrations import Migration, MigrationError
from effectusd.cli import main
from effectusd.client import Client
from effectusd.config import load_config
from tests.support.backends import HEX_DOMAIN_COLUMNS, postgres_store_migrations
from tests.support.backends import postgres_sql as sql

known_migrations = postgres_store_migrations.known_migrations
migrate = postgres_store_migrations.migrate
require_current = postgres_store_migrations.require_current
status = postgres_store_migrations.status

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_CONFIG = REPO / "examples" / "effectusd.toml"
EXAMPLE_PLAN = REPO / "examples" / "checkout.json"
EXAMPLE_FACTS = {"order": "o-1", "account_id": "acc-1", "amount": 1250, "currency": "EUR"}

DESIGN_TABLES = {
    "effectus_saga_instances",
    "effectus_saga_steps",
    "effectus_saga_outbox",
    "effectus_saga_attempts",
    "effectus_fencing_counters",
    "effectus_fencing_leases",
    "effectus_saga_events",
    "effectus_schema_migrations",
}
FIRST_MIGRATION = "10001_saga_outbox_v2"
ALL_MIGRATIONS = [(m.version, m.name) for m in known_migrations()]


# --- helpers -------------------------------------------------------------------------------


def effectus_tables(url: str) -> set[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables "
            "WHERE schemaname = current_schema() AND tablename LIKE 'effectus\\_%'"
        ).fetchall()
    return {row[0] for row in rows}


def snapshot(url: str) -> dict[str, tuple[int, str]]:
    """Row count and a digest of the contents of every effectus_* table."""
    result = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for table in sorted(effectus_tables(url)):
            query = psql.SQL(
                "SELECT count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) "
                "FROM {} AS t"
            ).format(psql.Identifier(table))
            count, digest = conn.execute(query).fetchone()  # type: ignore[misc]
            result[table] = (count, digest)
    return result


def applied_rows(url: str) -> list[tuple[int, str]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(
            "SELECT version, name FROM effectus_schema_migrations ORDER BY version"
        ).fetchall()


def migrate_url(url: str) -> list[Migration]:
    with psycopg.connect(url, autocommit=True) as conn:
        return migrate(conn)


def cli(*args: str) -> Any:
    env = {"EFFECTUSD_CONFIG": None, "EFFECTUSD_DATABASE_URL": None}
    return CliRunner().invoke(main, list(args), env=env)


def wait_for_lock_waiters(url: str, count: int, timeout: float = 30.0) -> None:
    """Return once ``count`` backends of this database wait on an advisory lock."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as watcher:
        while time.monotonic() < deadline:
            row = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock' "
                "AND wait_event = 'advisory'"
            ).fetchone()
            if row is not None and row[0] >= count:
                return
    pytest.fail(f"{count} migrators never queued on the advisory lock")


def submit_example_saga(url: str, execution_id: str = "order-1") -> str:
    client = Client(load_config(EXAMPLE_CONFIG), database_url=url)
    plan = json.loads(EXAMPLE_PLAN.read_text())
    return client.submit(plan, execution_id=execution_id, facts=EXAMPLE_FACTS).saga_id


# --- what the first migration creates --------------------------------------------------------


def test_migrate_on_an_empty_database_creates_every_design_table(empty_database: str) -> None:
    assert effectus_tables(empty_database) == set()

    applied = migrate_url(empty_database)

    assert [(m.version, m.name) for m in applied] == ALL_MIGRATIONS
    assert f"{applied[0].version}_{applied[0].name}" == FIRST_MIGRATION
    assert effectus_tables(empty_database) >= DESIGN_TABLES
    assert applied_rows(empty_database) == ALL_MIGRATIONS


def test_migrate_records_the_checksum_of_the_file_it_applied(empty_database: str) -> None:
    migrate_url(empty_database)

    with psycopg.connect(empty_database, autocommit=True) as conn:
        (checksum,) = conn.execute(
            "SELECT checksum FROM effectus_schema_migrations WHERE version = 10001"
        ).fetchone()  # type: ignore[misc]
    source = REPO / "schema" / "migrations" / f"{FIRST_MIGRATION}.sql"
    assert checksum == Migration(10001, "saga_outbox_v2", source.read_text("utf-8")).checksum


def test_second_migrate_applies_nothing_and_changes_nothing(empty_database: str) -> None:
    migrate_url(empty_database)
    before = snapshot(empty_database)

    assert migrate_url(empty_database) == []
    assert snapshot(empty_database) == before


def test_status_shows_the_migration_pending_before_and_nothing_pending_after(
    empty_database: str,
) -> None:
    with psycopg.connect(empty_database, autocommit=True) as conn:
        before = status(conn)
        assert before.applied == []
        assert [f"{m.version}_{m.name}" for m in before.pending] == [
            f"{m.version}_{m.name}" for m in known_migrations()
        ]
        assert FIRST_MIGRATION in {f"{m.version}_{m.name}" for m in before.pending}
        assert before.problems == []
        assert not before.current

        migrate(conn)

        after = status(conn)
        assert after.pending == []
        assert after.problems == []
        assert after.applied == [m.version for m in known_migrations()]
        assert after.current


def test_status_on_an_empty_database_does_not_create_the_migrations_table(
    empty_database: str,
) -> None:
    with psycopg.connect(empty_database, autocommit=True) as conn:
        status(conn)
    assert effectus_tables(empty_database) == set()


def test_require_current_refuses_an_unmigrated_database_and_accepts_a_migrated_one(
    empty_database: str,
) -> None:
    with psycopg.connect(empty_database, autocommit=True) as conn:
        with pytest.raises(MigrationError, match="behind") as refused:
            require_current(conn)
        assert FIRST_MIGRATION in str(refused.value)

        migrate(conn)
        require_current(conn)  # does not raise


def test_the_outbox_claim_indexes_are_partial_so_terminal_rows_stay_out(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'effectus_saga_outbox'"
        ).fetchall()
    claim_indexes = {
        name: definition
        for name, definition in rows
        if "next_attempt_at" in definition or "lease_expires_at" in definition
    }
    assert claim_indexes, "the outbox has no index for its claim path"
    for name, definition in claim_indexes.items():
        assert " WHERE " in definition, f"{name} is not partial: {definition}"
        assert "succeeded" not in definition, f"{name} holds terminal rows: {definition}"


# --- refusing a database the code does not match ---------------------------------------------


def test_database_with_a_migration_unknown_to_the_code_is_reported_newer(
    empty_database: str,
) -> None:
    migrate_url(empty_database)
    with psycopg.connect(empty_database, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO effectus_schema_migrations (version, name, checksum) "
            "VALUES (99999, 'from_the_future', %s)",
            ("0" * 64,),
        )
    before = snapshot(empty_database)

    with psycopg.connect(empty_database, autocommit=True) as conn:
        current = status(conn)
        assert not current.current
        assert len(current.problems) == 1
        assert "99999_from_the_future" in current.problems[0]
        assert "newer" in current.problems[0]

        with pytest.raises(MigrationError, match="newer"):
            require_current(conn)
        with pytest.raises(MigrationError, match="newer"):
            migrate(conn)

    assert snapshot(empty_database) == before


def test_applied_migration_whose_file_changed_is_reported_and_refused(
    empty_database: str,
) -> None:
    migrate_url(empty_database)
    with psycopg.connect(empty_database, autocommit=True) as conn:
        conn.execute(
            "UPDATE effectus_schema_migrations SET checksum = %s WHERE version = 10001",
            ("f" * 64,),
        )
    before = snapshot(empty_database)

    with psycopg.connect(empty_database, autocommit=True) as conn:
        current = status(conn)
        assert not current.current
        assert any(
            FIRST_MIGRATION in problem and "changed after it was applied" in problem
            for problem in current.problems
        ), current.problems

        with pytest.raises(MigrationError, match="changed after it was applied"):
            require_current(conn)
        with pytest.raises(MigrationError, match="changed after it was applied"):
            migrate(conn)

    assert snapshot(empty_database) == before


# --- the CLI ---------------------------------------------------------------------------------


def test_migrate_check_exits_6_when_pending_without_touching_the_database(
    empty_database: str,
) -> None:
    result = cli("--database-url", empty_database, "migrate", "--check")

    assert result.exit_code == 6, result.output
    assert FIRST_MIGRATION in result.stdout
    assert effectus_tables(empty_database) == set()


def test_migrate_check_exits_0_once_the_cli_migrated(empty_database: str) -> None:
    applied = cli("--database-url", empty_database, "migrate")
    assert applied.exit_code == 0, applied.output
    assert f"applied {FIRST_MIGRATION}" in applied.stdout

    checked = cli("--database-url", empty_database, "migrate", "--check", "--json")

    assert checked.exit_code == 0, checked.output
    report = json.loads(checked.stdout)
    assert report == {"applied": [v for v, _ in ALL_MIGRATIONS], "pending": [], "problems": []}

    again = cli("--database-url", empty_database, "migrate")
    assert again.exit_code == 0, again.output
    assert "up to date" in again.stdout


def test_migrate_cli_refuses_a_newer_database_with_exit_4_and_changes_nothing(
    empty_database: str,
) -> None:
    migrate_url(empty_database)
    with psycopg.connect(empty_database, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO effectus_schema_migrations (version, name, checksum) "
            "VALUES (99999, 'from_the_future', %s)",
            ("0" * 64,),
        )
    before = snapshot(empty_database)

    checked = cli("--database-url", empty_database, "migrate", "--check")
    applied = cli("--database-url", empty_database, "migrate")

    assert checked.exit_code == 4, checked.output
    assert "newer" in checked.stdout
    assert applied.exit_code == 4, applied.output
    assert "newer" in applied.stderr
    assert snapshot(empty_database) == before


# --- the advisory lock -----------------------------------------------------------------------


def test_two_concurrent_migrators_both_succeed_and_the_migration_is_applied_once(
    empty_database: str,
) -> None:
    with ThreadPoolExecutor(max_workers=2) as pool:
        # Hold the migration lock so that both migrators are queued on it at the same time.
        with psycopg.connect(empty_database, autocommit=True) as holder:
            with holder.transaction():
                holder.execute(sql("migrations_lock"))
                futures = [pool.submit(migrate_url, empty_database) for _ in range(2)]
                wait_for_lock_waiters(empty_database, 2)
        results = [future.result(timeout=60) for future in futures]

    # Each migration is its own locked transaction: the two may share the work, never repeat it.
    applied_by_both = sorted((m.version, m.name) for applied in results for m in applied)
    assert applied_by_both == ALL_MIGRATIONS
    assert applied_rows(empty_database) == ALL_MIGRATIONS
    assert effectus_tables(empty_database) >= DESIGN_TABLES


# --- schema constraints ----------------------------------------------------------------------


def test_a_fencing_counter_cannot_decrease(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO effectus_fencing_counters (resource, last_token) VALUES ('account:a', 5)"
        )
        with pytest.raises(psycopg.errors.RaiseException, match="may not decrease"):
            conn.execute(
                "UPDATE effectus_fencing_counters SET last_token = 4 WHERE resource = 'account:a'"
            )
        conn.execute(
            "UPDATE effectus_fencing_counters SET last_token = 6 WHERE resource = 'account:a'"
        )
        (token,) = conn.execute(
            "SELECT last_token FROM effectus_fencing_counters WHERE resource = 'account:a'"
        ).fetchone()  # type: ignore[misc]
    assert token == 6


def test_saga_events_are_append_only(db: str) -> None:
    submit_example_saga(db)
    before = snapshot(db)

    with psycopg.connect(db, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
            conn.execute("UPDATE effectus_saga_events SET actor = 'someone else'")

    assert snapshot(db) == before


def test_an_outbox_lease_is_all_or_nothing(db: str) -> None:
    submit_example_saga(db)
    before = snapshot(db)

    with psycopg.connect(db, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("UPDATE effectus_saga_outbox SET lease_owner = 'worker-1'")

    assert snapshot(db) == before


def test_a_hash_is_refused_wherever_it_is_set(db: str) -> None:
    # 10022: the 64-hex rule of the outbox's and the saga's hashes is a domain's, checked
    # where a value is set (an insert, an update of that column), not on every rewrite.
    submit_example_saga(db)
    before = snapshot(db)

    with psycopg.connect(db, autocommit=True) as conn:
        for table, column in HEX_DOMAIN_COLUMNS:
            if table == "effectus_saga_steps":
                continue  # a submit writes no step row (10018): inserted below
            for bad in ("A" * 64, "0" * 63, "0" * 63 + "g"):
                with pytest.raises(psycopg.errors.CheckViolation, match="effectus_hex64"):
                    conn.execute(f"UPDATE {table} SET {column} = %s", [bad])
        with pytest.raises(psycopg.errors.CheckViolation, match="effectus_hex64"):
            conn.execute(
                "INSERT INTO effectus_saga_steps (saga_id, effect_id, sequence, verb,"
                " contract_hash, state) SELECT saga_id, 'x', 99, 'v', 'not hex', 'pending'"
                " FROM effectus_saga_instances"
            )
    assert snapshot(db) == before


def test_a_result_is_stored_only_on_a_forward_success(db: str) -> None:
    # a step's result and order of success are its forward dispatch's (migration 10016)
    submit_example_saga(db)
    before = snapshot(db)

    with psycopg.connect(db, autocommit=True) as conn:
        for assignment in ("result = '{}'", "succeeded_order = 1"):
            with pytest.raises(psycopg.errors.CheckViolation):  # the dispatch is queued
                conn.execute(f"UPDATE effectus_saga_outbox SET {assignment}")
        with pytest.raises(psycopg.errors.CheckViolation):  # a compensation stores none
            conn.execute(
                "UPDATE effectus_saga_outbox SET state = 'succeeded', attempt = 1,"
                " direction = 'compensation', result = 'null'"
            )

    assert snapshot(db) == before


def test_one_dispatch_per_saga_effect_and_direction(db: str) -> None:
    submit_example_saga(db)
    before = snapshot(db)

    with psycopg.connect(db, autocommit=True, row_factory=dict_row) as conn:
        row = conn.execute("SELECT * FROM effectus_saga_outbox").fetchone()
        assert row is not None
        copy = {
            key: value
            for key, value in row.items()
            if key not in {"dispatch_id", "created_at", "updated_at", "next_attempt_at"}
        }
        copy["idempotency_key"] = "e" * 64  # not the key's own unique constraint
        copy["fencing_resources"] = json.dumps(copy["fencing_resources"])
        columns = psql.SQL(", ").join(psql.Identifier(name) for name in copy)
        values = psql.SQL(", ").join(psql.Placeholder(name) for name in copy)
        with pytest.raises(psycopg.errors.UniqueViolation) as duplicate:
            conn.execute(
                psql.SQL("INSERT INTO effectus_saga_outbox ({}) VALUES ({})").format(
                    columns, values
                ),
                copy,
            )
    assert "(saga_id, effect_id, direction)" in (duplicate.value.diag.message_detail or "")
    assert snapshot(db) == before


HEX_CHECKS = """
SELECT c.conrelid::regclass::text AS table_name, c.conname, a.attname,
       pg_get_expr(c.conbin, c.conrelid) AS expression, c.convalidated
FROM pg_constraint c
JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
WHERE c.contype = 'c' AND c.conrelid::regclass::text LIKE 'effectus_%'
  AND pg_get_expr(c.conbin, c.conrelid) LIKE '%0-9a-f%'
UNION ALL
-- a domain's check (10022) speaks of VALUE: evaluated on a column named so
SELECT c.contypid::regtype::text, c.conname, 'value',
       pg_get_expr(c.conbin, 0), c.convalidated
FROM pg_constraint c
WHERE c.contype = 'c' AND c.contypid = 'effectus_hex64'::regtype
"""
COLUMNS_OF_HEX_DOMAIN = """
SELECT a.attrelid::regclass::text || '.' || a.attname AS column_name
FROM pg_attribute a
WHERE a.atttypid = 'effectus_hex64'::regtype AND NOT a.attisdropped
ORDER BY 1
"""


def test_every_hex_column_accepts_exactly_64_lowercase_hex_digits(db: str) -> None:
    # The rule of the identities (docs/design.md section 3), as each constraint states it,
    # evaluated on values that sit on its edges. Since 10013 no constraint says it with a
    # bounded repetition (`{64}`): PostgreSQL evaluates every CHECK of a row on each UPDATE,
    # and that regular expression cost ~12 µs a time, ~14 times per saga step.
    hexes = "0123456789abcdef"
    values = [
        "a" * 64,
        hexes * 4,
        "0" * 63,
        "0" * 65,
        "A" * 64,
        "0" * 63 + "g",
        "0" * 63 + "\n",
        "\n" + "0" * 63,
        "0" * 31 + " " + "0" * 32,
        "é" + "0" * 63,
        "",
    ]
    expected = [len(v) == 64 and all(ch in hexes for ch in v) for v in values]
    query = "SELECT {} AS ok FROM unnest(%s::text[]) WITH ORDINALITY AS u({}, n) ORDER BY n"
    verdicts = {}
    with psycopg.connect(db, autocommit=True, row_factory=dict_row) as conn:
        checks = conn.execute(HEX_CHECKS).fetchall()
        for check in checks:
            evaluate = psql.SQL(query).format(
                psql.SQL(check["expression"]), psql.Identifier(check["attname"])
            )
            verdicts[check["conname"]] = [row["ok"] for row in conn.execute(evaluate, [values])]
        domain_columns = [row["column_name"] for row in conn.execute(COLUMNS_OF_HEX_DOMAIN)]
    # Since 10022 the columns a step's rows rewrite have the rule from a domain (checked
    # where a value is set, not on every rewrite of the row); the saga ids keep a table's.
    assert {check["table_name"] for check in checks} == {
        "effectus_hex64",
        "effectus_saga_instances",
        "effectus_saga_tombstones",
    }
    assert domain_columns == sorted(f"{table}.{column}" for table, column in HEX_DOMAIN_COLUMNS)
    assert len(checks) == 3, [check["conname"] for check in checks]
    assert all(check["convalidated"] for check in checks)
    assert not [check["conname"] for check in checks if "{64}" in check["expression"]]
    assert verdicts == dict.fromkeys(verdicts, expected)

"""The wheel ships what the code reads at run time: the migrations of both stores, the store's
named queries and the bench's own."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.backends import postgres_store_migrations

REPO = Path(__file__).resolve().parents[2]
FIRST_MIGRATION = "10001_saga_outbox_v2"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--quiet",
            "-w",
            str(out),
            str(REPO),
        ],
        check=True,
        cwd=REPO,
        capture_output=True,
    )
    (built,) = out.glob("effectusd-*.whl")
    return built


def test_the_wheel_ships_the_migrations_and_the_named_queries(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        shipped = archive.read(f"effectusd/_migrations/{FIRST_MIGRATION}.sql")

    assert "effectusd/store/postgres/queries/insert_saga.sql" in names
    source_queries = REPO / "effectusd" / "store" / "postgres" / "queries"
    for query in source_queries.glob("*.sql"):
        assert f"effectusd/store/postgres/queries/{query.name}" in names
    source_migrations = REPO / "schema" / "migrations"
    for migration in source_migrations.glob("*.sql"):
        assert f"effectusd/_migrations/{migration.name}" in names
    assert shipped == (source_migrations / f"{FIRST_MIGRATION}.sql").read_bytes()
    for query in (REPO / "effectusd" / "store" / "sqlite" / "queries").glob("*.sql"):
        assert f"effectusd/store/sqlite/queries/{query.name}" in names
    backend_statements = list((REPO / "effectusd" / "backends").glob("*/sql/*.sql"))
    assert backend_statements  # the backends' own (e.g. sqlite/sql/table_exists.sql)
    for statement in backend_statements:
        assert f"{statement.relative_to(REPO).as_posix()}" in names
    bench_queries = list((REPO / "effectusd" / "bench" / "queries").glob("*.sql"))
    assert bench_queries
    for query in bench_queries:
        assert f"effectusd/bench/queries/{query.name}" in names
    templates = sorted((REPO / "effectusd" / "console" / "templates").glob("*.html"))
    assert templates  # the console's pages
    for template in templates:
        assert f"effectusd/console/templates/{template.name}" in names
    for migration in (REPO / "schema" / "sqlite").glob("*.sql"):
        assert f"effectusd/_sqlite_migrations/{migration.name}" in names


def test_migrations_read_from_the_wheel_match_the_source_tree(wheel: Path) -> None:
    folder = zipfile.Path(wheel, "effectusd/_migrations/")

    from_wheel = postgres_store_migrations.known_migrations(folder)

    assert [(m.version, m.name, m.checksum) for m in from_wheel] == [
        (m.version, m.name, m.checksum) for m in postgres_store_migrations.known_migrations()
    ]

"""The wheel ships what the code reads at run time: the migrations of both stores (kept in the
repository's top-level ``schema/``, which ``effectusd/schema`` links) and every named statement
(``effectusd/sql/<dialect>/<owner>/``); installed, effectusd reads its migrations from the
package."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import effectusd
from effectusd.backends.migrations import known_migrations
from effectusd.store.sql import POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS
from tests.support.backends import postgres_store_migrations
from tests.unit.test_sql_folders import LOADERS

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
        shipped = archive.read(f"effectusd/schema/migrations/{FIRST_MIGRATION}.sql")

    assert "effectusd/sql/postgres/store/insert_saga.sql" in names
    statements = list((REPO / "effectusd" / "sql").rglob("*.sql"))
    owners = {statement.parent.relative_to(REPO).as_posix() for statement in statements}
    assert owners == {  # each dialect's folder, one subfolder per owner of statements
        f"effectusd/sql/{dialect}/{owner}"
        for dialect, owner_names in (
            ("postgres", ("store", "backend", "bench", "destination", "authority")),
            ("sqlite", ("store", "backend", "destination")),
        )
        for owner in owner_names
    }
    for statement in statements:
        assert statement.relative_to(REPO).as_posix() in names
    source_migrations = REPO / "schema" / "migrations"
    for migration in source_migrations.glob("*.sql"):
        assert f"effectusd/schema/migrations/{migration.name}" in names
    assert shipped == (source_migrations / f"{FIRST_MIGRATION}.sql").read_bytes()
    templates = sorted((REPO / "effectusd" / "console" / "templates").glob("*.html"))
    assert templates  # the console's pages
    for template in templates:
        assert f"effectusd/console/templates/{template.name}" in names
    for migration in (REPO / "schema" / "sqlite").glob("*.sql"):
        assert f"effectusd/schema/sqlite/{migration.name}" in names
    # the fencing authority's, one of them a link to the stores' migration 10023: shipped as
    # the file it names
    for migration in (REPO / "schema" / "authority").glob("*.sql"):
        with zipfile.ZipFile(wheel) as archive:
            shipped_text = archive.read(f"effectusd/schema/authority/{migration.name}")
        assert shipped_text == migration.read_bytes()


def test_migrations_read_from_the_wheel_match_the_source_tree(wheel: Path) -> None:
    folder = zipfile.Path(wheel, "effectusd/schema/migrations/")

    from_wheel = postgres_store_migrations.known_migrations(folder)

    assert [(m.version, m.name, m.checksum) for m in from_wheel] == [
        (m.version, m.name, m.checksum) for m in postgres_store_migrations.known_migrations()
    ]


INSTALLED_MIGRATIONS = """
import json
from importlib.resources import files
from effectusd.store.sql import POSTGRES_MIGRATIONS as POSTGRES
from effectusd.store.sql import SQLITE_MIGRATIONS as SQLITE
from tests.unit.test_sql_folders import LOADERS
print(json.dumps({
    **{
        name: {"folder": str(mset.folder()), "known": [m.checksum for m in mset.known()]}
        for name, mset in (("postgresql", POSTGRES), ("sqlite", SQLITE))
    },
    "statements": {
        s.folder: {"root": str(files(s.package)), "texts": {n: s.text(n) for n in s.names()}}
        for s in LOADERS.values()
    },
}))
"""


def test_an_installed_wheel_reads_its_migrations_and_statements_from_the_package(
    wheel: Path, tmp_path: Path
) -> None:
    target = tmp_path / "installed"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", target, wheel],
        check=True,
        capture_output=True,
    )
    # PYTHONPATH goes before the editable install's path to this repository
    found = subprocess.run(
        [sys.executable, "-c", INSTALLED_MIGRATIONS],
        check=True,
        capture_output=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(target)},
        text=True,
    )

    by_dialect = json.loads(found.stdout)
    for dialect, source in (("postgresql", "migrations"), ("sqlite", "sqlite")):
        folder = Path(by_dialect[dialect]["folder"])
        assert folder == target / "effectusd" / "schema" / source
        checksums = [m.checksum for m in known_migrations(REPO / "schema" / source)]
        assert by_dialect[dialect]["known"] == checksums and checksums
    statements = by_dialect["statements"]
    assert set(statements) == {loader.folder for loader in LOADERS.values()}
    for loader in LOADERS.values():  # each owner of each dialect, read from the installed copy
        assert Path(statements[loader.folder]["root"]) == target / "effectusd"
        source = {name: loader.text(name) for name in loader.names()}
        assert statements[loader.folder]["texts"] == source and source


def test_the_store_reads_its_migrations_as_data_of_the_effectusd_package() -> None:
    """No lookup of a repository: in a source tree too, the files are the package's
    ``schema/`` (a link to the top-level ``schema/`` there, real files in the wheel)."""
    package = Path(effectusd.__file__).parent
    for mset, folder in ((POSTGRES_MIGRATIONS, "migrations"), (SQLITE_MIGRATIONS, "sqlite")):
        assert Path(str(mset.folder())) == package / "schema" / folder
    assert (package / "schema").resolve() == REPO / "schema"

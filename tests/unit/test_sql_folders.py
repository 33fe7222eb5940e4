"""The package's SQL: one folder per dialect (``effectusd/sql/<dialect>/``), one subfolder per
owner, each read through ``importlib.resources`` by its owner's loader; the installed wheel's
copy is checked in tests/integration/test_wheel.py."""

from __future__ import annotations

from importlib.resources import files

import pytest

from effectusd.backends.postgres.replication import STATEMENTS as POSTGRES_BACKEND
from effectusd.backends.sqlite.migrations import STATEMENTS as SQLITE_BACKEND
from effectusd.backends.statements import Statements
from effectusd.bench.database import BENCH_STATEMENTS
from effectusd.core.states import SagaState
from effectusd.destination.queries import POSTGRES as POSTGRES_KIT
from effectusd.destination.queries import SQLITE as SQLITE_KIT
from effectusd.fencing.authority import AUTHORITY_STATEMENTS
from effectusd.store.operations import lock_sagas_params
from effectusd.store.sql import MIGRATIONS, POSTGRES_STATEMENTS, SQLITE_STATEMENTS, store_backend

# (dialect folder, owner) -> the loader of that owner's statements in that dialect
LOADERS: dict[tuple[str, str], Statements] = {
    ("postgres", "store"): POSTGRES_STATEMENTS,
    ("postgres", "backend"): POSTGRES_BACKEND,
    ("postgres", "bench"): BENCH_STATEMENTS,
    ("postgres", "destination"): POSTGRES_KIT,
    ("postgres", "authority"): AUTHORITY_STATEMENTS,
    ("sqlite", "store"): SQLITE_STATEMENTS,
    ("sqlite", "backend"): SQLITE_BACKEND,
    ("sqlite", "destination"): SQLITE_KIT,
}


def test_every_folder_of_the_package_sql_is_read_by_one_owner() -> None:
    root = files("effectusd") / "sql"
    folders = {
        (dialect.name, owner.name)
        for dialect in root.iterdir()
        if dialect.is_dir()
        for owner in dialect.iterdir()
        if owner.is_dir() and owner.name != "__pycache__"
    }

    assert folders == set(LOADERS)
    for (dialect, owner), statements in LOADERS.items():
        assert (statements.package, statements.folder) == ("effectusd", f"sql/{dialect}/{owner}")


@pytest.mark.parametrize(("dialect", "owner"), sorted(LOADERS))
def test_each_owner_reads_every_statement_of_its_folder(dialect: str, owner: str) -> None:
    statements = LOADERS[dialect, owner]
    names = statements.names()

    assert names, f"no statement found in sql/{dialect}/{owner}"
    for name in names:
        assert statements.text(name).strip(), f"sql/{dialect}/{owner}/{name}.sql is empty"


@pytest.mark.parametrize(
    ("url", "statements"),
    [
        ("postgresql://effectusd@127.0.0.1/x", POSTGRES_STATEMENTS),
        ("sqlite:///x.db", SQLITE_STATEMENTS),
    ],
)
def test_the_store_hands_the_backend_its_statements_of_the_url_dialect(
    url: str, statements: Statements
) -> None:
    backend = store_backend(url)  # builds the backend only: nothing connects

    assert backend.runner.statements is statements  # type: ignore[attr-defined]
    assert backend.migrator.migrations is MIGRATIONS[backend.dialect]
    mset = backend.migrator.migrations
    for name in (mset.create, mset.applied, mset.record, mset.exists, mset.lock):
        assert name is None or name in statements.names()


def test_a_missing_statement_names_its_owner_and_path() -> None:
    with pytest.raises(LookupError, match=r"no statement sql/sqlite/store/no_such\.sql"):
        SQLITE_STATEMENTS.text("no_such")


@pytest.mark.parametrize("statements", [POSTGRES_STATEMENTS, SQLITE_STATEMENTS])
def test_lock_sagas_takes_the_blocked_states_from_saga_state_and_lists_none(
    statements: Statements,
) -> None:
    """A blocked state added to SagaState gets its compensation reason back with no SQL
    edit: the statement names no blocked state, the parameter carries every one."""
    text = statements.text("lock_sagas")
    assert [s.value for s in SagaState if s.is_blocked and f"'{s.value}'" in text] == []
    assert "blocked_states" in text
    blocked = lock_sagas_params()["blocked_states"]
    assert blocked == sorted(state.value for state in SagaState if state.is_blocked)
    assert "blocked_destination" in blocked and "blocked_unknown" in blocked

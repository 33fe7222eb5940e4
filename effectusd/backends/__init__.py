"""One backend per database dialect: the only code that touches a database driver.

``backend_for(url, schemas)`` is the one place the dialect is chosen; everything above (the
store, the client, the daemon, the command line, the destination kit, the bench) asks the
backend it gets, each audience through its own part: the ``runner`` connects (or borrows the
caller's connection or pool) and runs operations (``operation.py``) sync and async;
``notifications`` wake the daemon and ``Client.wait`` (PostgreSQL: LISTEN; SQLite: none, they
poll; ``changes.py``); the ``migrator`` reads, applies and checks a migration set
(``migrations.py``). The SQL is its owner's: the store (``effectusd.store.sql.store_backend``)
hands the backend its migration set of each dialect, whose named statements
(``statements.py``) the runner and the notifications run; a backend never names another
package's files.

Adding a database means adding a folder here (and the store's statements in its dialect,
``effectusd/sql/<dialect>/store/``).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, Protocol, TypeVar

from effectusd.backends.changes import AsyncSagaChanges, SagaChanges
from effectusd.backends.connections import Connection
from effectusd.backends.migrations import Migration, MigrationSet, MigrationStatus
from effectusd.backends.operation import Operation
from effectusd.core.database_url import Dialect, PostgresDatabase, parse_database_url

T = TypeVar("T")

__all__ = [
    "Backend",
    "Connection",
    "Migrator",
    "Notifications",
    "Replication",
    "Runner",
    "Session",
    "backend_for",
]


class Session(Protocol):
    """A daemon's long-lived use of the store: a pool (PostgreSQL) or a worker thread (SQLite)."""

    async def write(self, operation: Operation[T]) -> T: ...
    async def write_single(self, operation: Operation[T]) -> T: ...
    async def read(self, operation: Operation[T]) -> T: ...
    async def close(self) -> None: ...


class Replication(Protocol):
    """What the daemon's connections found about their server's replication (PostgreSQL)."""

    def connected_sync(self, conn: Any) -> object:
        """Read ``conn``'s server; raise if the daemon must not use it."""

    def report(self) -> dict[str, object]:
        """The ``/readyz`` body's ``replication`` entry."""


class Runner(Protocol):
    """Runs store operations (the client, the command line, the operator, the console; the
    daemon through its session)."""

    dialect: Dialect

    def connect(self, *, create: bool = False) -> AbstractContextManager[Any]: ...
    # ReadOnlyServer if the connection's server takes no writes (a command that writes).
    def check_writable(self, conn: Any) -> None: ...
    def run(self, conn: Any, operation: Operation[T]) -> T: ...
    def join(self, conn: object, who: str = "Client") -> None: ...
    # ``source``: the caller's connection or pool to run on; None: a connection of our own.
    def borrow(self, source: object | None = None) -> AbstractContextManager[Any]: ...
    async def run_async(self, operation: Operation[T], source: object | None = None) -> T: ...
    async def run_joined_async(self, conn: object, operation: Operation[T]) -> T: ...
    # The watch every connection of open_session's pool reports to (None: SQLite).
    def watch_replication(self, *, require_synchronous: bool) -> Replication | None: ...
    async def open_session(self, min_size: int, max_size: int) -> Session: ...


class Notifications(Protocol):
    """Says when something may have changed (the daemon's wake-ups, ``Client.wait``):
    PostgreSQL's LISTEN, or nothing at all and the caller polls."""

    poll_interval_s: float  # how often an idle daemon looks for due work unless woken
    notifies: bool  # whether wakeups() says when work may be due (else the daemon polls)

    def wakeups(self) -> AsyncGenerator[None, None]: ...
    def saga_changes(self) -> AbstractContextManager[SagaChanges]: ...
    def saga_changes_async(self) -> AbstractAsyncContextManager[AsyncSagaChanges]: ...


class Migrator(Protocol):
    """Reads, applies and checks the schema the backend serves (the store's: ``effectusd
    migrate``, the daemon's and the console's start)."""

    migrations: MigrationSet  # that schema in this dialect

    def status(self, conn: Any, known: list[Migration] | None = None) -> MigrationStatus: ...
    def migrate(self, conn: Any, known: list[Migration] | None = None) -> list[Migration]: ...
    def require_current(self, conn: Any) -> None: ...


class Backend(Protocol):
    """One database, and what each audience uses of it."""

    dialect: Dialect
    url: str

    @property
    def runner(self) -> Runner: ...
    @property
    def notifications(self) -> Notifications: ...
    @property
    def migrator(self) -> Migrator: ...


def backend_for(url: str, schemas: Mapping[Dialect, MigrationSet]) -> Backend:
    """The backend of the database ``url`` names, serving ``schemas``' set of its dialect (the
    caller's schema: the store's, or the destination kit's); DatabaseURLError if no backend
    understands the URL. The drivers are imported here, on first use, not by whoever merely
    validates a URL."""
    database = parse_database_url(url)
    schema = schemas[database.dialect]
    if isinstance(database, PostgresDatabase):
        from effectusd.backends.postgres import PostgresBackend

        return PostgresBackend(url, database, schema)
    from effectusd.backends.sqlite import SqliteBackend

    return SqliteBackend(url, database, schema)

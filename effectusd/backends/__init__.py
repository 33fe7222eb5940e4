"""One backend per database dialect: the only code that touches a database driver.

``backend_for(url)`` is the one place the dialect is chosen; everything above (the store, the
client, the daemon, the command line, the destination kit, the bench) asks the backend it
gets. A backend connects (or borrows the caller's connection or pool), runs operations
(``operation.py``) sync and async, wakes the daemon and ``Client.wait`` (PostgreSQL: LISTEN;
SQLite: none, they poll; ``changes.py``), applies migration sets
(``migrations.py``) and names the store's statements (``statements.py``).

Adding a database means adding a folder here (and the store's statements in its dialect).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, Protocol, TypeVar

from effectusd.backends.changes import AsyncSagaChanges, SagaChanges
from effectusd.backends.connections import Connection
from effectusd.backends.migrations import Migration, MigrationSet, MigrationStatus
from effectusd.backends.operation import Operation
from effectusd.backends.statements import Statements
from effectusd.core.database_url import Dialect, PostgresDatabase, parse_database_url

T = TypeVar("T")

__all__ = ["Backend", "Connection", "Replication", "Session", "backend_for"]


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


class Backend(Protocol):
    dialect: Dialect
    url: str
    poll_interval_s: float  # how often an idle daemon looks for due work unless woken
    notifies: bool  # whether wakeups() says when work may be due (else the daemon polls)
    statements: Statements  # the store's named SQL in this dialect
    migrations: MigrationSet  # the store's schema in this dialect

    def connect(self, *, create: bool = False) -> AbstractContextManager[Any]: ...
    def run(self, conn: Any, operation: Operation[T]) -> T: ...
    def join(self, conn: object, who: str = "Client") -> None: ...
    # ``source``: the caller's connection or pool to run on; None: a connection of our own.
    def borrow(self, source: object | None = None) -> AbstractContextManager[Any]: ...
    async def run_async(self, operation: Operation[T], source: object | None = None) -> T: ...
    async def run_joined_async(self, conn: object, operation: Operation[T]) -> T: ...
    def migration_status(
        self, conn: Any, known: list[Migration] | None = None
    ) -> MigrationStatus: ...
    def migrate(self, conn: Any, known: list[Migration] | None = None) -> list[Migration]: ...
    def require_current(self, conn: Any) -> None: ...
    def wakeups(self) -> AsyncGenerator[None, None]: ...
    def saga_changes(self) -> AbstractContextManager[SagaChanges]: ...
    def saga_changes_async(self) -> AbstractAsyncContextManager[AsyncSagaChanges]: ...
    # The watch every connection of open_session's pool reports to (None: SQLite).
    def watch_replication(self, *, require_synchronous: bool) -> Replication | None: ...
    async def open_session(self, min_size: int, max_size: int) -> Session: ...


def backend_for(url: str) -> Backend:
    """The backend of the database ``url`` names; DatabaseURLError if none understands it.
    The drivers are imported here, on first use, not by whoever merely validates a URL."""
    database = parse_database_url(url)
    if isinstance(database, PostgresDatabase):
        from effectusd.backends.postgres import PostgresBackend

        return PostgresBackend(url, database)
    from effectusd.backends.sqlite import SqliteBackend

    return SqliteBackend(url, database)

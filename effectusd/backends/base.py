"""What every backend does the same way whatever its dialect: the policy of its migrator
(``Migrator``, effectusd.backends)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from effectusd.backends.migrations import (
    Migration,
    MigrationSet,
    MigrationStatus,
    raise_unless_current,
)


class StoreMigrator(ABC):
    """Reads, applies and checks the store's schema in one dialect (``Migrator``): the
    dialect's migrations module applies ``migrations``."""

    def __init__(self, migrations: MigrationSet) -> None:
        self.migrations = migrations

    @abstractmethod
    def status(self, conn: Any, known: list[Migration] | None = None) -> MigrationStatus:
        """What is applied, what is pending, what is wrong (``known``: the set's files)."""

    @abstractmethod
    def migrate(self, conn: Any, known: list[Migration] | None = None) -> list[Migration]:
        """Apply every pending migration; the ones applied now."""

    def require_current(self, conn: Any) -> None:
        """Refuse to run against a schema older or newer than this code."""
        raise_unless_current(self.status(conn))

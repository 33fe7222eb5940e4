"""Connection pools for services (the destination kit's ``effectus_app``)."""

from __future__ import annotations

from typing import Any

from psycopg_pool import AsyncConnectionPool, PoolTimeout

from effectusd.backends.postgres.driver_logs import quiet_driver_logs
from effectusd.backends.postgres.hosts import primary_conninfo
from effectusd.core.database_url import PostgresDatabase

__all__ = ["AsyncPool", "PoolTimeout", "service_pool"]

AsyncPool = AsyncConnectionPool[Any]


def service_pool(database: PostgresDatabase, min_size: int, max_size: int) -> AsyncPool:
    """A pool, not yet open, whose connections are tested before each use: a pooled
    connection may have died with its server (a restart or a failover); a URL naming several
    hosts connects to the one that takes writes."""
    quiet_driver_logs()
    return AsyncConnectionPool(
        primary_conninfo(database),
        min_size=min_size,
        max_size=max_size,
        open=False,
        check=AsyncConnectionPool.check_connection,
    )

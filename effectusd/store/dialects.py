"""The dispatch store of each dialect: they differ only in how they claim (one statement on
PostgreSQL, a few under the write lock on SQLite); the backend supplies the session."""

from __future__ import annotations

from effectusd.backends import Backend
from effectusd.core.registry import Registry
from effectusd.fencing.protocol import FencingProvider
from effectusd.store.dispatch import DispatchStore
from effectusd.store.postgres.dispatch import PostgresDispatchStore
from effectusd.store.sqlite.dispatch import SqliteDispatchStore

DISPATCH_STORES: dict[str, type[DispatchStore]] = {
    "postgresql": PostgresDispatchStore,
    "sqlite": SqliteDispatchStore,
}


async def open_dispatch_store(
    backend: Backend,
    registry: Registry,
    owner: str,
    lease_margin_s: float,
    fencing: FencingProvider,
    pool_size: tuple[int, int] = (2, 10),
    namespace: str | None = None,
) -> DispatchStore:
    """The dispatch store on ``backend``: a connection pool of ``pool_size`` (min, max) on
    PostgreSQL, one worker thread on SQLite; claiming only ``namespace``'s rows, if given."""
    session = await backend.runner.open_session(*pool_size)
    store_class = DISPATCH_STORES[backend.dialect]
    return store_class(session, registry, owner, lease_margin_s, fencing, namespace)

"""Client and AsyncClient: submit sagas inside the application's own transaction, read them.

with psycopg.connect(url) as conn:            # or sqlite3.connect("effectusd.db")
    conn.execute("INSERT INTO orders ...")
    client.submit(plan, execution_id="order-7", facts={...}, conn=conn)
# committed together: the saga exists if and only if the order does
"""

from __future__ import annotations

import asyncio
import getpass
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from effectusd.backends import Connection, backend_for
from effectusd.backends.connections import AsyncPostgresConnection
from effectusd.backends.operation import Operation
from effectusd.config import Config, load_config
from effectusd.core.canonical import JsonValue
from effectusd.core.errors import SagaNotFound, WaitTimeout
from effectusd.core.plan import CheckedPlan, PlanSpec
from effectusd.core.registry import Registry
from effectusd.core.states import SagaState
from effectusd.core.submission import ensure_checked, prepare_submission
from effectusd.core.views import SagaView
from effectusd.store import operations
from effectusd.store.operations import SubmitResult

PlanInput = CheckedPlan | PlanSpec | Mapping[str, Any]
T = TypeVar("T")


@dataclass(frozen=True)
class Submission:
    """One saga for ``Client.submit_many``."""

    plan: PlanInput
    execution_id: str
    facts: Mapping[str, JsonValue] | None = None


__all__ = ["AsyncClient", "Client", "Submission", "SubmitResult"]


def registry_from_config(config: Config) -> Registry:
    return Registry(
        verbs=dict(config.verbs),
        destination_timeouts={name: dest.timeout for name, dest in config.destinations.items()},
        fence_wait_limit=config.fence_wait_limit(),
    )


def default_actor() -> str:
    try:
        return f"user:{getpass.getuser()}"
    except (KeyError, OSError):
        return "user:unknown"


class _ClientBase:
    def __init__(self, config: Config | None = None, *, database_url: str | None = None) -> None:
        self.config = config or load_config(None)
        self.backend = backend_for(database_url or self.config.database.url)
        self.database_url = self.backend.url
        self.registry = registry_from_config(self.config)
        self.namespace = self.config.namespace

    @classmethod
    def from_config_file(cls, path: str, *, database_url: str | None = None) -> Any:
        return cls(load_config(path), database_url=database_url)

    def _prepare(
        self, plan: PlanInput, execution_id: str, facts: Mapping[str, JsonValue] | None
    ) -> Any:
        checked = ensure_checked(plan, self.registry)
        return prepare_submission(checked, self.registry, self.namespace, execution_id, facts or {})


class Client(_ClientBase):
    """Synchronous client. Pass ``conn`` (a psycopg or a sqlite3 connection to the store's
    database) to write inside your own open transaction."""

    def submit(
        self,
        plan: PlanInput,
        *,
        execution_id: str,
        facts: Mapping[str, JsonValue] | None = None,
        conn: Connection | None = None,
        not_before: datetime | None = None,
        actor: str = "client",
    ) -> SubmitResult:
        rows = self._prepare(plan, execution_id, facts)
        operation = operations.submit(rows, actor, not_before)
        return self._write(operation, conn)

    def submit_many(
        self,
        submissions: Iterable[Submission],
        *,
        conn: Connection | None = None,
        not_before: datetime | None = None,
        actor: str = "client",
    ) -> list[SubmitResult]:
        """Submit many sagas at once: one transaction and a fixed number of statements for the
        whole batch, whatever its size. All or nothing: a plan that fails its check or a
        conflict with an existing saga raises and writes nothing. Results come in order."""
        batch = [self._prepare(s.plan, s.execution_id, s.facts) for s in submissions]
        operation = operations.submit_many(batch, actor, not_before)
        return self._write(operation, conn)

    def _write(self, operation: Operation[T], conn: Connection | None) -> T:
        """In the caller's transaction when given one (it commits), else in our own."""
        if conn is not None:
            self.backend.join(conn)
            return self.backend.run(conn, operation)
        return self._run(operation)

    def _run(self, operation: Operation[T]) -> T:
        with self.backend.connect() as own:
            return self.backend.run(own, operation)

    def get(self, saga_id: str) -> SagaView | None:
        return self._run(operations.load_saga(saga_id))

    def list(
        self,
        state: str | None = None,
        plan_id: str | None = None,
        limit: int = 100,
        older_than: timedelta | None = None,
    ) -> list[dict[str, Any]]:
        """Sagas newest first; ``older_than`` keeps those created before now minus it."""
        return self._run(operations.list_sagas(state, plan_id, self.namespace, limit, older_than))

    def wait(self, saga_id: str, timeout: float = 30.0, interval: float = 0.05) -> SagaView:
        """Poll until the saga is terminal or blocked; raises TimeoutError naming its state."""
        deadline = time.monotonic() + timeout
        while True:
            view = self.get(saga_id)
            if view is None:
                raise SagaNotFound(f"saga {saga_id} does not exist")
            state = SagaState(view["state"])
            if state.is_terminal or state.is_blocked:
                return view
            if time.monotonic() >= deadline:
                raise WaitTimeout(f"saga {saga_id} still {state.value} after {timeout}s")
            time.sleep(interval)


class AsyncClient(_ClientBase):
    """Asynchronous client; same semantics as Client. On PostgreSQL it speaks psycopg's
    AsyncConnection; on SQLite the backend runs each operation in a worker thread."""

    async def submit(
        self,
        plan: PlanInput,
        *,
        execution_id: str,
        facts: Mapping[str, JsonValue] | None = None,
        conn: AsyncPostgresConnection | None = None,
        not_before: datetime | None = None,
        actor: str = "client",
    ) -> SubmitResult:
        rows = self._prepare(plan, execution_id, facts)
        operation = operations.submit(rows, actor, not_before)
        return await self._write(operation, conn)

    async def submit_many(
        self,
        submissions: Iterable[Submission],
        *,
        conn: AsyncPostgresConnection | None = None,
        not_before: datetime | None = None,
        actor: str = "client",
    ) -> list[SubmitResult]:
        """``Client.submit_many``, asynchronously."""
        prepared = [self._prepare(s.plan, s.execution_id, s.facts) for s in submissions]
        operation = operations.submit_many(prepared, actor, not_before)
        return await self._write(operation, conn)

    async def _write(self, operation: Operation[T], conn: AsyncPostgresConnection | None) -> T:
        """In the caller's transaction when given one (it commits), else in our own."""
        if conn is not None:
            return await self.backend.run_joined_async(conn, operation)
        return await self.backend.run_async(operation)

    async def get(self, saga_id: str) -> SagaView | None:
        return await self.backend.run_async(operations.load_saga(saga_id))

    async def wait(self, saga_id: str, timeout: float = 30.0, interval: float = 0.05) -> SagaView:
        deadline = time.monotonic() + timeout
        while True:
            view = await self.get(saga_id)
            if view is None:
                raise SagaNotFound(f"saga {saga_id} does not exist")
            state = SagaState(view["state"])
            if state.is_terminal or state.is_blocked:
                return view
            if time.monotonic() >= deadline:
                raise WaitTimeout(f"saga {saga_id} still {state.value} after {timeout}s")
            await asyncio.sleep(interval)

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

import psycopg

from effectusd.config import Config, load_config
from effectusd.core.canonical import JsonValue
from effectusd.core.errors import SagaNotFound, WaitTimeout, WrongConnection
from effectusd.core.plan import CheckedPlan, PlanSpec
from effectusd.core.registry import Registry
from effectusd.core.states import SagaState
from effectusd.core.submission import ensure_checked, prepare_submission
from effectusd.core.views import SagaView
from effectusd.store import backends, operations
from effectusd.store.operations import SubmitResult
from effectusd.store.postgres.runner import join_transaction_async, run_async

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
        self.database_url = backends.check_url(database_url or self.config.database.url)
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
        conn: backends.Connection | None = None,
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
        conn: backends.Connection | None = None,
        not_before: datetime | None = None,
        actor: str = "client",
    ) -> list[SubmitResult]:
        """Submit many sagas at once: one transaction and a fixed number of statements for the
        whole batch, whatever its size. All or nothing: a plan that fails its check or a
        conflict with an existing saga raises and writes nothing. Results come in order."""
        batch = [self._prepare(s.plan, s.execution_id, s.facts) for s in submissions]
        operation = operations.submit_many(batch, actor, not_before)
        return self._write(operation, conn)

    def _write(self, operation: operations.Operation[T], conn: backends.Connection | None) -> T:
        """In the caller's transaction when given one (it commits), else in our own."""
        if conn is not None:
            backends.require_store(self.database_url, conn)
            backends.join_transaction(conn)
            return backends.run(conn, operation)
        with backends.connection(self.database_url) as own:
            return backends.run(own, operation)

    def get(self, saga_id: str) -> SagaView | None:
        with backends.connection(self.database_url) as conn:
            return backends.run(conn, operations.load_saga(saga_id))

    def list(
        self,
        state: str | None = None,
        plan_id: str | None = None,
        limit: int = 100,
        older_than: timedelta | None = None,
    ) -> list[dict[str, Any]]:
        """Sagas newest first; ``older_than`` keeps those created before now minus it."""
        with backends.connection(self.database_url) as conn:
            return backends.run(
                conn, operations.list_sagas(state, plan_id, self.namespace, limit, older_than)
            )

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


def _require_async_connection(url: str, conn: object) -> None:
    if not isinstance(conn, psycopg.AsyncConnection):
        raise WrongConnection(
            f"AsyncClient joins a psycopg.AsyncConnection's transaction, not a "
            f"{type(conn).__name__}; on SQLite pass your sqlite3 connection to Client instead"
        )
    if backends.is_sqlite(url):
        raise WrongConnection(
            "AsyncClient is configured for the SQLite store (database URL) and cannot join a "
            "PostgreSQL transaction; check the database URL it was given"
        )


class AsyncClient(_ClientBase):
    """Asynchronous client; same semantics as Client. On PostgreSQL it speaks psycopg's
    AsyncConnection; on SQLite the synchronous client runs in a worker thread."""

    async def submit(
        self,
        plan: PlanInput,
        *,
        execution_id: str,
        facts: Mapping[str, JsonValue] | None = None,
        conn: psycopg.AsyncConnection[Any] | None = None,
        not_before: datetime | None = None,
        actor: str = "client",
    ) -> SubmitResult:
        if conn is None and backends.is_sqlite(self.database_url):
            return await asyncio.to_thread(
                self._sync().submit,
                plan,
                execution_id=execution_id,
                facts=facts,
                not_before=not_before,
                actor=actor,
            )
        rows = self._prepare(plan, execution_id, facts)
        operation = operations.submit(rows, actor, not_before)
        return await self._write(operation, conn)

    async def submit_many(
        self,
        submissions: Iterable[Submission],
        *,
        conn: psycopg.AsyncConnection[Any] | None = None,
        not_before: datetime | None = None,
        actor: str = "client",
    ) -> list[SubmitResult]:
        """``Client.submit_many``, asynchronously."""
        if conn is None and backends.is_sqlite(self.database_url):
            batch = list(submissions)
            return await asyncio.to_thread(
                self._sync().submit_many, batch, not_before=not_before, actor=actor
            )
        prepared = [self._prepare(s.plan, s.execution_id, s.facts) for s in submissions]
        operation = operations.submit_many(prepared, actor, not_before)
        return await self._write(operation, conn)

    async def _write(
        self, operation: operations.Operation[T], conn: psycopg.AsyncConnection[Any] | None
    ) -> T:
        if conn is not None:
            _require_async_connection(self.database_url, conn)
            await join_transaction_async(conn)
            with backends.schema_checked():
                return await run_async(conn, operation)
        backends.check_url(self.database_url)
        async with await psycopg.AsyncConnection.connect(self.database_url) as own:
            with backends.schema_checked():
                return await run_async(own, operation)

    async def get(self, saga_id: str) -> SagaView | None:
        if backends.is_sqlite(self.database_url):
            return await asyncio.to_thread(self._sync().get, saga_id)
        async with await psycopg.AsyncConnection.connect(self.database_url) as conn:
            with backends.schema_checked():
                return await run_async(conn, operations.load_saga(saga_id))

    def _sync(self) -> Client:
        return Client(self.config, database_url=self.database_url)

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

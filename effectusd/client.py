"""Client and AsyncClient: submit sagas inside the application's own transaction, read them.

with psycopg.connect(url) as conn:
    conn.execute("INSERT INTO orders ...")
    client.submit(plan, execution_id="order-7", facts={...}, conn=conn)
# committed together: the saga exists if and only if the order does
"""

from __future__ import annotations

import asyncio
import getpass
import time
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import psycopg

from effectusd.config import Config, load_config
from effectusd.core.canonical import JsonValue
from effectusd.core.plan import CheckedPlan, PlanSpec
from effectusd.core.registry import Registry
from effectusd.core.states import SagaState
from effectusd.core.submission import ensure_checked, prepare_submission
from effectusd.core.views import SagaView
from effectusd.store import operations
from effectusd.store.operations import SubmitResult
from effectusd.store.postgres.runner import (
    join_transaction,
    join_transaction_async,
    run,
    run_async,
)

PlanInput = CheckedPlan | PlanSpec | Mapping[str, Any]

__all__ = ["AsyncClient", "Client", "SubmitResult"]


def registry_from_config(config: Config) -> Registry:
    return Registry(
        verbs=dict(config.verbs),
        destination_timeouts={name: dest.timeout for name, dest in config.destinations.items()},
    )


def default_actor() -> str:
    try:
        return f"user:{getpass.getuser()}"
    except (KeyError, OSError):
        return "user:unknown"


class _ClientBase:
    def __init__(self, config: Config | None = None, *, database_url: str | None = None) -> None:
        self.config = config or load_config(None)
        self.database_url = database_url or self.config.database.url
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
    """Synchronous client. Pass ``conn`` to write inside your own open transaction."""

    def submit(
        self,
        plan: PlanInput,
        *,
        execution_id: str,
        facts: Mapping[str, JsonValue] | None = None,
        conn: psycopg.Connection[Any] | None = None,
        not_before: datetime | None = None,
        actor: str = "client",
    ) -> SubmitResult:
        rows = self._prepare(plan, execution_id, facts)
        operation = operations.submit(rows, actor, not_before)
        if conn is not None:
            join_transaction(conn)
            return run(conn, operation)
        with psycopg.connect(self.database_url) as own:
            return run(own, operation)

    def get(self, saga_id: str) -> SagaView | None:
        with psycopg.connect(self.database_url) as conn:
            return run(conn, operations.load_saga(saga_id))

    def list(
        self,
        state: str | None = None,
        plan_id: str | None = None,
        limit: int = 100,
        older_than: timedelta | None = None,
    ) -> list[dict[str, Any]]:
        """Sagas newest first; ``older_than`` keeps those created before now minus it."""
        with psycopg.connect(self.database_url) as conn:
            return run(
                conn, operations.list_sagas(state, plan_id, self.namespace, limit, older_than)
            )

    def wait(self, saga_id: str, timeout: float = 30.0, interval: float = 0.05) -> SagaView:
        """Poll until the saga is terminal or blocked; raises TimeoutError naming its state."""
        deadline = time.monotonic() + timeout
        while True:
            view = self.get(saga_id)
            if view is None:
                raise LookupError(f"saga {saga_id} does not exist")
            state = SagaState(view["state"])
            if state.is_terminal or state.is_blocked:
                return view
            if time.monotonic() >= deadline:
                raise TimeoutError(f"saga {saga_id} still {state.value} after {timeout}s")
            time.sleep(interval)


class AsyncClient(_ClientBase):
    """Asynchronous client over psycopg's AsyncConnection; same semantics as Client."""

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
        rows = self._prepare(plan, execution_id, facts)
        operation = operations.submit(rows, actor, not_before)
        if conn is not None:
            await join_transaction_async(conn)
            return await run_async(conn, operation)
        async with await psycopg.AsyncConnection.connect(self.database_url) as own:
            return await run_async(own, operation)

    async def get(self, saga_id: str) -> SagaView | None:
        async with await psycopg.AsyncConnection.connect(self.database_url) as conn:
            return await run_async(conn, operations.load_saga(saga_id))

    async def wait(self, saga_id: str, timeout: float = 30.0, interval: float = 0.05) -> SagaView:
        deadline = time.monotonic() + timeout
        while True:
            view = await self.get(saga_id)
            if view is None:
                raise LookupError(f"saga {saga_id} does not exist")
            state = SagaState(view["state"])
            if state.is_terminal or state.is_blocked:
                return view
            if time.monotonic() >= deadline:
                raise TimeoutError(f"saga {saga_id} still {state.value} after {timeout}s")
            await asyncio.sleep(interval)

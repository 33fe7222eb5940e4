"""Client and AsyncClient: submit sagas inside the application's own transaction, read them
as typed views (core/views.py), wait for them.

with psycopg.connect(url) as conn:            # or sqlite3.connect("effectusd.db")
    conn.execute("INSERT INTO orders ...")
    client.submit(plan, execution_id="order-7", facts={...}, conn=conn)
# committed together: the saga exists if and only if the order does

A client works on connections of its own (opened from the database URL), on the caller's
``connection``, or on connections borrowed from the caller's psycopg ``pool``.
"""

from __future__ import annotations

import getpass
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any, TypeVar

from effectusd import tracing
from effectusd.backends import Connection
from effectusd.backends.connections import (
    AsyncPostgresConnection,
    AsyncPostgresPool,
    PostgresPool,
    pool_url,
    require_async_connection,
    require_connection,
    require_pool,
)
from effectusd.backends.errors import UNAVAILABLE
from effectusd.backends.operation import Operation, finished
from effectusd.config import Config, ConfigError, load_config
from effectusd.core.canonical import JsonValue
from effectusd.core.errors import (
    SagaNotFound,
    WaitTimeout,
    WaitUnreachable,
    WrongConnection,
)
from effectusd.core.plan import CheckedPlan, PlanSpec
from effectusd.core.states import SagaState
from effectusd.core.submission import ensure_checked, prepare_submission
from effectusd.core.views import SagaSummary, SagaView, summarize
from effectusd.store import operations
from effectusd.store.operations import SubmitResult
from effectusd.store.sql import store_backend

PlanInput = CheckedPlan | PlanSpec | Mapping[str, Any]
# What ``wait`` waits for: a predicate of the view, or the states to reach; None: the saga is
# terminal (completed, compensated, failed) or blocked (it waits for an operator).
Until = Callable[[SagaView], bool] | Collection[SagaState | str] | None
T = TypeVar("T")


@dataclass(frozen=True)
class Submission:
    """One saga for ``Client.submit_many``."""

    plan: PlanInput
    execution_id: str
    facts: Mapping[str, JsonValue] | None = None


__all__ = ["AsyncClient", "Client", "Submission", "SubmitResult"]


def default_actor() -> str:
    try:
        return f"user:{getpass.getuser()}"
    except (KeyError, OSError):
        return "user:unknown"


def settled(view: SagaView) -> bool:
    """``wait``'s default: nothing more happens without an operator."""
    return view.state.is_terminal or view.state.is_blocked


def until_states(until: Until) -> frozenset[SagaState] | None:
    """The states ``until`` names; None for the default and for a predicate."""
    if until is None or callable(until):
        return None
    return frozenset(SagaState(state) for state in until)  # ValueError: no such state


# A wait whose read failed after an earlier one worked (the database restarting or failing
# over) reads again after at most this long, until its timeout.
WAIT_RETRY_S = 0.5


def until_predicate(until: Until) -> Callable[[SagaView], bool]:
    if until is None:
        return settled
    if callable(until):
        return until
    states = until_states(until) or frozenset()
    return lambda view: view.state in states


def never_reached(states: frozenset[SagaState] | None, view: SagaView) -> WaitUnreachable | None:
    """A saga that finished in a state ``until`` does not name never moves again: waiting
    out the timeout would only delay the same answer (docs/design.md section 11, Waiting).
    A blocked saga is waited for: an operator may move it on."""
    if states is None or not view.state.is_terminal or view.state in states:
        return None
    wanted = " or ".join(sorted(state.value for state in states)) or "in an empty set of states"
    return WaitUnreachable(
        f"saga {view.saga_id} finished {view.state.value}: it will never be {wanted}", view
    )


def lookup(
    namespace: str, saga_id: str | None, execution_id: str | None, plan_id: str | None
) -> Operation[SagaView | None]:
    """``operations.locate_saga`` and load in one go (one connection, one transaction)."""
    found = yield from operations.locate_saga(
        saga_id, namespace=namespace, execution_id=execution_id, plan_id=plan_id
    )
    if found is None:
        return None
    return (yield from operations.load_saga(found))


def own_store_url(config: Config) -> str:
    """The database URL of a client given none: the config's ``[database] url``. With
    ``[database.stores]`` there is none to take (never the SQLite default): the application
    submits into its own store, whose URL it names."""
    if config.database.stores:
        raise ConfigError(
            f"database.stores lists stores ({', '.join(sorted(config.database.stores))}) and a "
            "client works on one, its application's own: give database_url= (or a pool) with "
            "that store's URL, and set namespace to that store's namespace"
        )
    return config.database.url


class _ClientBase:
    """``connection``: the caller's connection, used for everything (a submit joins its
    transaction); ``pool``: the caller's psycopg pool, one connection borrowed per operation
    (its URL is the database URL unless ``database_url`` says otherwise). Neither: the client
    opens connections of its own from the database URL (``database_url`` or the config's)."""

    asynchronous = False

    def __init__(
        self,
        config: Config | None = None,
        *,
        database_url: str | None = None,
        connection: object | None = None,
        pool: object | None = None,
    ) -> None:
        if connection is not None and pool is not None:
            raise WrongConnection("give the client a connection or a pool, not both")
        self.config = config or load_config(None)
        url = database_url or pool_url(pool) or own_store_url(self.config)
        self.backend = store_backend(url)
        self.database_url = self.backend.url
        self.registry = self.config.registry()
        self.namespace = self.config.namespace
        self.connection = connection
        self.pool = pool
        if pool is not None:
            require_pool(self.backend.dialect, pool, asynchronous=self.asynchronous)
        if connection is not None and self.asynchronous:
            require_async_connection(self.backend.dialect, connection)
        elif connection is not None:
            require_connection(self.backend.dialect, connection, "Client")

    @classmethod
    def from_config_file(cls, path: str, **options: Any) -> Any:
        """A client of the configuration file ``path`` (``options`` as for the constructor)."""
        return cls(load_config(path), **options)

    def _prepare(
        self, plan: PlanInput, execution_id: str, facts: Mapping[str, JsonValue] | None
    ) -> Any:
        checked = ensure_checked(plan, self.registry)
        return prepare_submission(checked, self.registry, self.namespace, execution_id, facts or {})

    def _submit(
        self,
        plan: PlanInput,
        execution_id: str,
        facts: Mapping[str, JsonValue] | None,
        actor: str,
        not_before: datetime | None,
    ) -> Operation[SubmitResult]:
        """The one submit both clients run: checked and resolved here, with the caller's trace."""
        rows = self._prepare(plan, execution_id, facts)
        return operations.submit(rows, actor, not_before, tracing.capture())

    def _submit_many(
        self, submissions: Iterable[Submission], actor: str, not_before: datetime | None
    ) -> Operation[list[SubmitResult]]:
        prepared = [self._prepare(s.plan, s.execution_id, s.facts) for s in submissions]
        return operations.submit_many(prepared, actor, not_before, tracing.capture())

    def _lookup(
        self, saga_id: str | None, execution_id: str | None, plan_id: str | None
    ) -> Operation[SagaView | None]:
        return lookup(self.namespace, saga_id, execution_id, plan_id)

    def _list(
        self,
        state: SagaState | str | None,
        plan_id: str | None,
        limit: int,
        older_than: timedelta | None,
        states: Collection[SagaState | str] | None,
    ) -> Operation[list[SagaSummary]]:
        chosen = None if state is None else SagaState(state).value
        among = None if states is None else {SagaState(one).value for one in states}
        rows = yield from operations.list_sagas(
            chosen, plan_id, self.namespace, limit, older_than, states=among
        )
        return summarize(rows)


async def _waited(
    saga_id: str,
    timeout: float,
    until: Until,
    read: Callable[[], Awaitable[SagaView | None]],
    pause: Callable[[str, float], Awaitable[object]],
    poll_interval_s: float,
) -> SagaView:
    """``wait``, once for both clients: ``read`` the saga, ``pause`` on its notifications for
    at most the seconds given. The sync client's ``read`` and ``pause`` finish at their first
    step (``finished`` runs it); the async client's await its connections."""
    done, states = until_predicate(until), until_states(until)
    deadline = time.monotonic() + timeout
    last: SagaView | None = None
    while True:
        try:
            view = await read()
        except UNAVAILABLE:  # once the saga was read: a restart or failover, wait on
            if last is None or time.monotonic() >= deadline:
                raise
            await pause(last.saga_id, min(deadline - time.monotonic(), WAIT_RETRY_S))
            continue
        last = view
        if view is None:
            raise SagaNotFound(f"saga {saga_id} does not exist")
        if done(view):
            return view
        if (final := never_reached(states, view)) is not None:
            raise final
        left = deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeout(
                f"saga {view.saga_id} still {view.state.value} after {timeout}s", view
            )
        await pause(view.saga_id, min(left, poll_interval_s))


class Client(_ClientBase):
    """Synchronous client. Pass ``conn`` (a psycopg or a sqlite3 connection to the store's
    database) to a submit to write inside your own open transaction."""

    def __init__(
        self,
        config: Config | None = None,
        *,
        database_url: str | None = None,
        connection: Connection | None = None,
        pool: PostgresPool | None = None,
    ) -> None:
        super().__init__(config, database_url=database_url, connection=connection, pool=pool)

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
        return self._write(self._submit(plan, execution_id, facts, actor, not_before), conn)

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
        operation = self._submit_many(submissions, actor, not_before)
        return self._write(operation, conn)

    def _write(self, operation: Operation[T], conn: object | None) -> T:
        """In the caller's transaction when given one (it commits), else in our own."""
        joined = conn if conn is not None else self.connection
        if joined is not None:
            self.backend.runner.join(joined)
            return self.backend.runner.run(joined, operation)
        return self._run(operation)

    def _run(self, operation: Operation[T]) -> T:
        with self.backend.runner.borrow(self.connection or self.pool) as conn:
            return self.backend.runner.run(conn, operation)

    def get(
        self,
        saga_id: str | None = None,
        *,
        execution_id: str | None = None,
        plan_id: str | None = None,
    ) -> SagaView | None:
        """The saga named by its id (or a unique prefix of it), or by the execution id it was
        submitted under (with its plan id, unless only one plan ran under it); None if there is
        none. AmbiguousSaga if the name fits several."""
        return self._run(self._lookup(saga_id, execution_id, plan_id))

    def list(
        self,
        state: SagaState | str | None = None,
        plan_id: str | None = None,
        limit: int = 100,
        older_than: timedelta | None = None,
        *,
        states: Collection[SagaState | str] | None = None,
    ) -> list[SagaSummary]:
        """Sagas newest first; ``older_than`` keeps those created before now minus it,
        ``states`` those in any of them (``BLOCKED_SAGA_STATES``: every blocked saga)."""
        return self._run(self._list(state, plan_id, limit, older_than, states))

    def wait(self, saga_id: str, timeout: float = 30.0, *, until: Until = None) -> SagaView:
        """The saga's view once ``until`` holds (default: terminal or blocked). Wakes on the
        store's notification of the saga's state changes (PostgreSQL; looking again at least
        every ``backend.notifications.poll_interval_s``), polls on SQLite. SagaNotFound if
        there is no such saga, WaitTimeout (with the last view) if ``until`` still fails
        after ``timeout``s, at once (WaitUnreachable) when the saga finished in a state
        ``until`` does not name. Once it has read the saga, a database that goes away (a
        restart, a failover to a standby) is read again until the timeout, and the LISTEN
        connection opened again."""
        poll_s = self.backend.notifications.poll_interval_s
        # listening before the first read
        with self.backend.notifications.saga_changes() as changes:

            async def read() -> SagaView | None:
                return self.get(saga_id)

            async def pause(saga: str, seconds: float) -> None:
                changes.wait(saga, seconds)

            return finished(_waited(saga_id, timeout, until, read, pause, poll_s))


class AsyncClient(_ClientBase):
    """Asynchronous client; same semantics as Client. On PostgreSQL it speaks psycopg's
    AsyncConnection and AsyncConnectionPool; on SQLite the backend runs each operation in a
    worker thread."""

    asynchronous = True

    def __init__(
        self,
        config: Config | None = None,
        *,
        database_url: str | None = None,
        connection: AsyncPostgresConnection | None = None,
        pool: AsyncPostgresPool | None = None,
    ) -> None:
        super().__init__(config, database_url=database_url, connection=connection, pool=pool)

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
        operation = self._submit(plan, execution_id, facts, actor, not_before)
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
        operation = self._submit_many(submissions, actor, not_before)
        return await self._write(operation, conn)

    async def _write(self, operation: Operation[T], conn: object | None) -> T:
        """In the caller's transaction when given one (it commits), else in our own."""
        joined = conn if conn is not None else self.connection
        if joined is not None:
            return await self.backend.runner.run_joined_async(joined, operation)
        return await self._run(operation)

    async def _run(self, operation: Operation[T]) -> T:
        return await self.backend.runner.run_async(operation, self.connection or self.pool)

    async def get(
        self,
        saga_id: str | None = None,
        *,
        execution_id: str | None = None,
        plan_id: str | None = None,
    ) -> SagaView | None:
        """``Client.get``, asynchronously (on the pool, when the client has one)."""
        return await self._run(self._lookup(saga_id, execution_id, plan_id))

    async def list(
        self,
        state: SagaState | str | None = None,
        plan_id: str | None = None,
        limit: int = 100,
        older_than: timedelta | None = None,
        *,
        states: Collection[SagaState | str] | None = None,
    ) -> list[SagaSummary]:
        """``Client.list``, asynchronously."""
        return await self._run(self._list(state, plan_id, limit, older_than, states))

    async def wait(self, saga_id: str, timeout: float = 30.0, *, until: Until = None) -> SagaView:
        """``Client.wait``, asynchronously."""
        poll_s = self.backend.notifications.poll_interval_s
        async with self.backend.notifications.saga_changes_async() as changes:
            read = partial(self.get, saga_id)
            return await _waited(saga_id, timeout, until, read, changes.wait, poll_s)

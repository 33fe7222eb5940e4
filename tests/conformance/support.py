"""What the conformance tests drive a store with: one object per store under test, and the
pipeline's steps (claim, write-ahead, record) with outcomes the test chooses. No HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import sqlite3
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool

from effectusd.backends import Backend
from effectusd.backends.postgres.session import PoolSession
from effectusd.backends.sqlite.session import ThreadSession
from effectusd.client import Client
from effectusd.config import Config
from effectusd.core.engine import Completion
from effectusd.core.registry import Registry
from effectusd.core.states import FencingStatus, OutcomeClass
from effectusd.core.transition import HeldClaim
from effectusd.core.views import SagaView
from effectusd.dispatcher.capacity import Capacity
from effectusd.dispatcher.metrics import Metrics
from effectusd.dispatcher.pipeline import Pipeline
from effectusd.executors.factory import executor_for
from effectusd.executors.protocol import Executor
from effectusd.fencing.protocol import FencingProvider
from effectusd.fencing.store import StoreFencing
from effectusd.store import operations
from effectusd.store.dispatch import DispatchStore, RecordReport
from effectusd.store.postgres.dispatch import PostgresDispatchStore
from effectusd.store.records import Claim, WriteAhead
from effectusd.store.sql import POSTGRES_STATEMENTS, SQLITE_STATEMENTS, store_backend
from effectusd.store.sqlite.dispatch import SqliteDispatchStore
from tests.support import backends
from tests.support.destination import Destination, running
from tests.support.harness import make_config, serial_plan

T = TypeVar("T")

NOWHERE = "http://127.0.0.1:9"  # no call is ever made: the tests choose every outcome
RETRY = {"max_attempts": 3, "initial_backoff": "10s", "max_backoff": "1m"}
VERBS: dict[str, dict[str, Any]] = {
    "pay": {"retry": RETRY},  # at_most_once (the default)
    "pay_alo": {"delivery": "at_least_once", "retry": RETRY},
    "undo": {"retry": {**RETRY, "max_attempts": 2}},
    "fenced": {"fencing": ["res:{args.n}"], "delivery": "at_least_once", "retry": RETRY},
    "ship": {"destination": "other", "retry": RETRY},
}
TIMEOUT_S = 2.0  # the destinations' call timeout (make_config)
LEASE_MARGIN_S = 30.0  # leases never run out by themselves during a test: tests expire them
EPOCH_NOW = "((julianday('now') - 2440587.5) * 86400.0)"  # SQLite's clock, REAL epoch seconds


def conformance_config() -> Config:
    return make_config(
        NOWHERE,
        VERBS,
        destinations={"other": {"base_url": NOWHERE, "timeout": "2s", "max_concurrency": 4}},
    )


@dataclass
class StoreUnderTest:
    """One store, empty and migrated, and the few things a test needs that differ per store."""

    kind: str  # "postgres" | "sqlite"
    url: str
    config: Config = field(default_factory=conformance_config)
    _opened: list[DispatchStore] = field(default_factory=list)
    _pools: list[AsyncConnectionPool[Any]] = field(default_factory=list)

    @property
    def sqlite(self) -> bool:
        return self.kind == "sqlite"

    @property
    def backend(self) -> Backend:
        return store_backend(self.url)

    @property
    def registry(self) -> Registry:
        return self.config.registry()

    # -- store-neutral ----------------------------------------------------------------------
    @contextmanager
    def connect(self) -> Iterator[backends.Connection]:
        with backends.connection(self.url) as conn:
            yield conn

    def run(self, operation: operations.Operation[T]) -> T:
        with self.connect() as conn:
            return backends.run(conn, operation)

    def client(self) -> Client:
        return Client(self.config, database_url=self.url)

    def submit(self, plan: Mapping[str, Any], execution_id: str, **kwargs: Any) -> str:
        return self.client().submit(plan, execution_id=execution_id, **kwargs).saga_id

    def typed_view(self, saga_id: str) -> SagaView:
        view = self.run(operations.load_saga(saga_id))
        assert view is not None, f"saga {saga_id} not found"
        return view

    def view(self, saga_id: str) -> dict[str, Any]:
        """The saga's view as ``sagas show --json`` prints it (the typed view's JSON form)."""
        return self.typed_view(saga_id).model_dump(mode="json")

    async def dispatch_store(
        self,
        owner: str = "daemon-a",
        fencing: FencingProvider | None = None,
        lease_margin_s: float = LEASE_MARGIN_S,
    ) -> DispatchStore:
        """A DispatchStore on this database, closed when the test ends."""
        fencing = fencing if fencing is not None else StoreFencing()
        store: DispatchStore
        if self.sqlite:
            path = backends.sqlite_path(self.url)
            session = ThreadSession(path, SQLITE_STATEMENTS)
            store = SqliteDispatchStore(session, self.registry, owner, lease_margin_s, fencing)
        else:
            pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
                self.url,
                min_size=1,
                max_size=4,
                open=False,
                kwargs={"autocommit": True, "application_name": f"conformance-{owner}"},
            )
            await pool.open(wait=True)
            self._pools.append(pool)
            pooled = PoolSession(pool, POSTGRES_STATEMENTS)
            store = PostgresDispatchStore(pooled, self.registry, owner, lease_margin_s, fencing)
        self._opened.append(store)
        return store

    async def close(self) -> None:
        for store in self._opened:
            with contextlib.suppress(RuntimeError):  # a test may have closed it already
                await store.close()
        for pool in self._pools:  # the store should have closed it; make sure nothing leaks
            await pool.close()

    # -- store-specific ---------------------------------------------------------------------
    def execute(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """One raw statement (placeholders: ``%s`` on PostgreSQL, ``?`` on SQLite)."""
        with self.connect() as conn:
            cursor = conn.execute(statement, params)
            return list(cursor.fetchall()) if cursor.description else []

    def now_sql(self) -> str:
        return EPOCH_NOW if self.sqlite else "now()"

    def seconds_sql(self, seconds: float) -> str:
        return f"{seconds}" if self.sqlite else f"make_interval(secs => {seconds})"

    def expire_leases(self) -> None:
        """Make every live dispatch lease run out now (the database clock decides expiry)."""
        self.execute(
            "UPDATE effectus_saga_outbox SET lease_expires_at = "
            f"{self.now_sql()} - {self.seconds_sql(1)} WHERE state = 'in_flight'"
        )

    def make_due(self) -> None:
        """Bring every waiting dispatch's next attempt to now (instead of sleeping through a
        backoff or a not_before)."""
        self.execute(
            "UPDATE effectus_saga_outbox SET next_attempt_at = "
            f"{self.now_sql()} - {self.seconds_sql(1)}"
            " WHERE state IN ('queued', 'retry_wait')"
        )

    def spend_time_budget(self) -> None:
        """Start every dispatch's time budget (retry.give_up_after) far enough back that it is
        spent (instead of sleeping through it)."""
        self.execute(
            "UPDATE effectus_saga_outbox SET budget_since = "
            f"{self.now_sql()} - {self.seconds_sql(400 * 86400)}"
        )

    def backdate_finished(self, saga_id: str, seconds: float) -> None:
        mark = "?" if self.sqlite else "%s"
        self.execute(
            "UPDATE effectus_saga_instances SET finished_at = finished_at - "
            f"{self.seconds_sql(seconds)} WHERE saga_id = {mark}",
            (saga_id,),
        )

    def fence_leases(self) -> list[tuple[str, int, int]]:
        """(resource, holder dispatch id, token) of every fencing lease held now."""
        rows = self.execute(
            "SELECT resource, holder_dispatch_id, token FROM effectus_fencing_leases"
            " ORDER BY resource"
        )
        return [(r, int(d), int(t)) for r, d, t in rows]

    def server_connections(self, owner: str) -> int:
        """How many connections to this database the dispatch store of ``owner`` holds open (SQLite
        has no server: always 0)."""
        if self.sqlite:
            return 0
        rows = self.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = %s",
            (f"conformance-{owner}",),
        )
        return int(rows[0][0])

    @staticmethod
    def database_errors() -> tuple[type[BaseException], ...]:
        return (psycopg.Error, sqlite3.Error)


# -- driving the pipeline by hand ------------------------------------------------------------


def completion(
    claim: Claim,
    outcome: OutcomeClass,
    *,
    result: Any = None,
    error: str | None = None,
    status_code: int | None = None,
    fencing_status: FencingStatus | None = FencingStatus.NOT_REQUESTED,
    lease_token: str | None = None,
    attempt: int | None = None,
) -> Completion:
    """What the executor would report for ``claim`` (as pipeline._completion builds it)."""
    held = HeldClaim(
        claim.dispatch_id,
        claim.attempt if attempt is None else attempt,
        claim.lease_token if lease_token is None else lease_token,
    )
    answered = Completion.answered(
        held,
        outcome,
        status_code=status_code if status_code is not None else _status_of(outcome),
        result=result,
        error=error if error is not None or outcome is OutcomeClass.SUCCESS else outcome.value,
    )
    return replace(answered, fencing_status=fencing_status)  # as the test sets it


def _status_of(outcome: OutcomeClass) -> int | None:
    return {
        OutcomeClass.SUCCESS: 200,
        OutcomeClass.PERMANENT: 422,
        OutcomeClass.STALE_FENCE: 409,
        OutcomeClass.RETRYABLE: None,
        OutcomeClass.UNKNOWN: 503,
    }[outcome]


def pipeline_on(
    store: DispatchStore, under_test: StoreUnderTest, executors: dict[str, Executor] | None = None
) -> Pipeline:
    pipeline = Pipeline(
        store,
        executors or {},
        under_test.registry,
        Capacity(limits={"dest": 16}, total_limit=16),
        asyncio.Event(),
        Metrics(),
    )
    # These tests record by hand and read what the records left queued: nothing here calls
    # what the recorder would otherwise claim for itself.
    pipeline.claiming = False
    return pipeline


@asynccontextmanager
async def pipeline_with_destination(
    store: DispatchStore, under_test: StoreUnderTest
) -> AsyncIterator[tuple[Pipeline, Destination]]:
    """``pipeline_on`` with a real executor for "dest", calling a running test destination;
    the executor is closed and the destination stopped on the way out."""
    with running() as dest:
        config = under_test.config.destinations["dest"]
        executor = executor_for("dest", config.model_copy(update={"base_url": dest.base_url}))
        try:
            yield pipeline_on(store, under_test, {"dest": executor}), dest
        finally:
            await executor.aclose()


async def claim_one(store: DispatchStore, destination: str = "dest") -> Claim:
    claims = await store.claim({destination: 1})
    assert len(claims) == 1, claims
    return claims[0]


async def send(store: DispatchStore, claim: Claim) -> WriteAhead:
    """The write-ahead of one claim, which must be allowed to go."""
    ready, busy = await store.write_ahead([claim])
    assert busy == [] and [w.claim.dispatch_id for w in ready] == [claim.dispatch_id]
    return ready[0]


async def step(
    store: DispatchStore,
    outcome: OutcomeClass,
    *,
    destination: str = "dest",
    result: Any = None,
    error: str | None = None,
) -> tuple[Claim, RecordReport]:
    """Claim the one due dispatch, write it ahead, record ``outcome`` for it."""
    claim = await claim_one(store, destination)
    ahead = await send(store, claim)
    report = await store.record(
        [
            completion(
                claim,
                outcome,
                result=result,
                error=error,
                fencing_status=FencingStatus(ahead.fencing_status),
            )
        ]
    )
    assert (report.applied, report.late, report.dropped) == (1, 0, 0), report
    return claim, report


# -- reading a saga view ---------------------------------------------------------------------


def dispatch_in(view: dict[str, Any], effect_id: str, direction: str = "forward") -> dict[str, Any]:
    [step_view] = [s for s in view["steps"] if s["effect_id"] == effect_id]
    found = [d for d in step_view["dispatches"] if d["direction"] == direction]
    assert len(found) == 1, (effect_id, direction, step_view["dispatches"])
    dispatch: dict[str, Any] = found[0]
    return dispatch


def has_dispatch(view: dict[str, Any], effect_id: str, direction: str = "forward") -> bool:
    [step_view] = [s for s in view["steps"] if s["effect_id"] == effect_id]
    return any(d["direction"] == direction for d in step_view["dispatches"])


def step_states(view: dict[str, Any]) -> dict[str, str]:
    return {s["effect_id"]: s["state"] for s in view["steps"]}


def timeline(view: dict[str, Any], *kinds: str) -> list[tuple[Any, ...]]:
    """(kind, effect_id, direction, attempt, from_state, to_state) of each event, in order;
    only the given kinds when some are named."""
    return [
        (e["kind"], e["effect_id"], e["direction"], e["attempt"], e["from_state"], e["to_state"])
        for e in view["timeline"]
        if not kinds or e["kind"] in kinds
    ]


def when(value: str | None) -> datetime:
    assert value is not None
    return datetime.fromisoformat(value)


def sagas_with_one_unfenceable(store: StoreUnderTest) -> tuple[list[str], str]:
    """Three fenced sagas; the middle one's resource is longer than an index entry may be, so
    acquiring it fails (SQLite has no such limit: a trigger refuses the same resource).
    Returns the sagas and that resource."""
    sagas = [store.submit(serial_plan("f", ["fenced"]), f"x-{n}") for n in (1, 2, 3)]
    mark = "?" if store.sqlite else "%s"
    resources = ["res:a", "p" + secrets.token_hex(10_000), "res:c"]
    for saga, resource in zip(sagas, resources, strict=True):
        store.execute(
            f"UPDATE effectus_saga_outbox SET fencing_resources = {mark} WHERE saga_id = {mark}",
            (json.dumps([resource]), saga),
        )
    if store.sqlite:
        store.execute(
            "CREATE TRIGGER poison BEFORE INSERT ON effectus_fencing_leases"
            " WHEN length(NEW.resource) > 2704 BEGIN SELECT RAISE(ABORT, 'too long'); END"
        )
    return sagas, resources[1]

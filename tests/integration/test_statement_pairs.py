"""Each PostgreSQL write that has a set-based form (``NAME_many.sql``, which the runner sends a
batch of two rows or more through) leaves the tables its single-row form (``NAME.sql``, run
once per row) leaves.

The rows are the engine's own: a submit_many and a record batch (successes, a permanent
failure that starts compensation, a retry, two late answers) run once on a copy of a seeded
database, and every statement they ran is kept. Those transactions are then replayed on two
more copies of the seeded database: on one the pair's batches go one row at a time (the single
form), on the other as the runner sends them (the set-based form). Every table must come out
the same. A new ``_many`` file is covered as soon as it exists; one the workload never sends a
batch of fails here until the workload does."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import psycopg
import pytest
from psycopg import sql as psql
from psycopg.rows import dict_row

from effectusd.backends import Session
from effectusd.backends.operation import Done, Operation, Query, advance
from effectusd.backends.postgres import runner as postgres_runner
from effectusd.client import Submission
from effectusd.core.states import FencingStatus, OutcomeClass
from effectusd.store.sql import POSTGRES_STATEMENTS as STORE_STATEMENTS
from tests.conformance.support import NOWHERE, StoreUnderTest, completion, send
from tests.conformance.support import VERBS as CONFORMANCE_VERBS
from tests.conftest import create_database, drop_database
from tests.support import backends
from tests.support.harness import make_config, serial_plan

pytestmark = pytest.mark.postgres

T = TypeVar("T")
PAIRS = sorted(
    name.removesuffix("_many") for name in STORE_STATEMENTS.names() if name.endswith("_many")
)
# Clock-derived values (now(), clock_timestamp(), now() + a retry delay) differ between the two
# replays by when each ran; they are compared as seconds after their replay began, this close:
# far below the retry delay (half an hour or more), so a delay lost or doubled still shows.
CLOCK_TOLERANCE_S = 60.0
LONG_RETRY = {"max_attempts": 3, "initial_backoff": "1h", "max_backoff": "2h"}
VERBS = {**CONFORMANCE_VERBS, "pay_alo": {"delivery": "at_least_once", "retry": LONG_RETRY}}
Transaction = list[Query]


def recorded(operation: Operation[T], log: list[Transaction]) -> Operation[T]:
    """``operation``, each statement it runs kept (as one transaction of ``log``)."""
    queries: Transaction = []
    log.append(queries)
    step = advance(operation)
    while not isinstance(step, Done):
        queries.append(copy.deepcopy(step))
        step = advance(operation, (yield step))
    return step.value


@dataclass
class RecordingSession:
    """A dispatch store's session that keeps every write transaction's statements."""

    inner: Session
    log: list[Transaction]

    async def write(self, operation: Operation[T]) -> T:
        return await self.inner.write(recorded(operation, self.log))

    async def write_single(self, operation: Operation[T]) -> T:
        return await self.inner.write_single(recorded(operation, self.log))

    async def read(self, operation: Operation[T]) -> T:
        return await self.inner.read(operation)

    async def close(self) -> None:
        await self.inner.close()


async def seed(store: StoreUnderTest) -> list[Any]:
    """Sagas mid-flight, each dispatch claimed and written ahead; the completions the
    captured record batch reports for them."""
    sagas = {
        "advance": store.submit(serial_plan("two", ["pay", "pay"]), "advance"),
        "compensate": store.submit(
            serial_plan("comp", ["pay", "pay"], {"s1": "undo"}), "compensate"
        ),
        "retry": store.submit(serial_plan("retry", ["pay_alo"]), "retry"),
        "finish": store.submit(serial_plan("one", ["pay"]), "finish"),
        "late-a": store.submit(serial_plan("one", ["pay"]), "late-a"),
        "late-b": store.submit(serial_plan("one", ["pay"]), "late-b"),
    }
    daemon = await store.dispatch_store()
    claims = {claim.saga_id: claim for claim in await daemon.claim({"dest": 10})}
    for claim in claims.values():
        await send(daemon, claim)
    first = claims[sagas["compensate"]]
    report = await daemon.record([completion(first, OutcomeClass.SUCCESS, result={"n": 1})])
    assert report.applied == 1
    [second] = await daemon.claim({"dest": 10})
    await send(daemon, second)
    claims[second.saga_id] = second
    await store.close()

    def answer(name: str, outcome: OutcomeClass, **kwargs: Any) -> Any:
        claim = claims[sagas[name]]
        return completion(claim, outcome, fencing_status=FencingStatus.NOT_REQUESTED, **kwargs)

    forged = "00000000-0000-4000-8000-000000000000"  # not the lease: a late answer
    return [
        answer("advance", OutcomeClass.SUCCESS, result={"n": 10}),
        answer("compensate", OutcomeClass.PERMANENT, error="refused"),
        answer("retry", OutcomeClass.RETRYABLE, error="try later"),
        answer("finish", OutcomeClass.SUCCESS, result={"done": True}),
        answer("late-a", OutcomeClass.SUCCESS, lease_token=forged),
        answer("late-b", OutcomeClass.PERMANENT, lease_token=forged, error="no"),
    ]


async def capture(store: StoreUnderTest, completions: list[Any]) -> list[Transaction]:
    """The statements of a submit_many and of one record batch, run on ``store``."""
    log: list[Transaction] = []
    client = store.client()
    submissions = [Submission(serial_plan("new", ["pay", "ship"]), f"new-{i}") for i in range(3)]
    with store.connect() as conn:
        # the client's own submit_many operation, recorded as it runs
        backends.run(conn, recorded(client._submit_many(submissions, "client", None), log))
    daemon = await store.dispatch_store(owner="recorder")
    daemon.session = RecordingSession(daemon.session, log)
    report = await daemon.record(completions)
    assert (report.applied, report.late, report.dropped) == (4, 2, 0), report
    await store.close()
    return log


@dataclass(frozen=True)
class Workload:
    seeded_url: str  # the database every replay starts from a copy of
    transactions: list[Transaction]


@pytest.fixture(scope="module")
async def workload() -> AsyncIterator[Workload]:
    seeded = create_database("effectusd_pairs")
    with psycopg.connect(seeded, autocommit=True) as conn:
        backends.migrate(conn)
    config = make_config(
        NOWHERE,
        VERBS,
        destinations={"other": {"base_url": NOWHERE, "timeout": "2s", "max_concurrency": 4}},
    )
    completions = await seed(StoreUnderTest("postgres", seeded, config))
    captured = create_database("effectusd_pairs", template=seeded)
    try:
        transactions = await capture(StoreUnderTest("postgres", captured, config), completions)
        yield Workload(seeded, transactions)
    finally:
        drop_database(captured)
        drop_database(seeded)


def as_captured(transaction: Transaction) -> Operation[None]:
    # not ``yield from``: a list's iterator cannot be sent the rows the runner answers with
    for query in transaction:  # noqa: UP028
        yield query


def replay(workload: Workload, one_row_at_a_time: str | None = None) -> Snapshot:
    """The captured transactions on a fresh copy of the seeded database, as the runner runs
    them; ``one_row_at_a_time``: that statement's batches run once per row instead (its
    single-row form), each row's count of rows written kept."""
    url = create_database("effectusd_pairs", template=workload.seeded_url)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            began = conn.execute("SELECT now()").fetchone()
            assert began is not None
            written: list[int] = []
            for transaction in workload.transactions:
                if one_row_at_a_time is None:
                    postgres_runner.run(conn, as_captured(transaction), STORE_STATEMENTS)
                else:
                    written += _row_by_row(conn, transaction, one_row_at_a_time)
            return Snapshot(tables(conn, began[0]), written)
    finally:
        drop_database(url)


def _row_by_row(conn: psycopg.Connection[Any], transaction: Transaction, name: str) -> list[int]:
    """One transaction, ``name``'s batches run once per row (the other statements through the
    runner, each in a savepoint of it): how many rows each of ``name``'s rows wrote."""
    written = []
    with conn.transaction():
        for query_name, params in transaction:
            if query_name != name or isinstance(params, Mapping):
                postgres_runner.run(conn, as_captured([(query_name, params)]), STORE_STATEMENTS)
                continue
            with conn.cursor() as cursor:
                for row in params:
                    cursor.execute(postgres_runner.sql(STORE_STATEMENTS, name), row)
                    written.append(cursor.rowcount)
    return written


@dataclass(frozen=True)
class Snapshot:
    tables: dict[str, list[dict[str, Any]]]
    written: list[int]  # rows written by each row of the single-row form


def tables(conn: psycopg.Connection[Any], began: datetime) -> dict[str, list[dict[str, Any]]]:
    """Every table's rows, in an order that does not depend on the clock; a timestamp the
    replay wrote (at or after ``began``) as ("clock", seconds after ``began``)."""
    names = conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename"
    ).fetchall()
    found = {}
    with conn.cursor(row_factory=dict_row) as cursor:
        for (name,) in names:
            cursor.execute(psql.SQL("SELECT * FROM {}").format(psql.Identifier(name)))
            rows = [
                {column: _clock(value, began) for column, value in row.items()}
                for row in cursor.fetchall()
            ]
            found[name] = sorted(rows, key=_without_clock)
    return found


def _clock(value: Any, began: datetime) -> Any:
    if isinstance(value, datetime) and value >= began:
        return ("clock", (value - began).total_seconds())
    return value


def _without_clock(row: Mapping[str, Any]) -> str:
    return repr([value for value in row.values() if not _is_clock(value)])


def _is_clock(value: Any) -> bool:
    return isinstance(value, tuple) and len(value) == 2 and value[0] == "clock"


def within_tolerance(found: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """``found`` with each clock value matching any within ``CLOCK_TOLERANCE_S`` of it."""
    return {
        name: [
            {
                column: ("clock", pytest.approx(value[1], abs=CLOCK_TOLERANCE_S))
                if _is_clock(value)
                else value
                for column, value in row.items()
            }
            for row in rows
        ]
        for name, rows in found.items()
    }


def test_every_set_based_write_has_its_single_row_form() -> None:
    assert PAIRS  # the runner's set-based forms are found
    for name in PAIRS:
        assert name in STORE_STATEMENTS.names(), f"{name}_many.sql has no {name}.sql"


@pytest.mark.parametrize("name", PAIRS)
def test_the_set_based_form_leaves_the_tables_the_single_row_form_leaves(
    workload: Workload, name: str
) -> None:
    batches = [
        len(params)
        for transaction in workload.transactions
        for query_name, params in transaction
        if query_name == name and not isinstance(params, Mapping)
    ]
    assert any(size >= 2 for size in batches), (
        f"the workload never sends {name} a batch of two rows or more (the set-based form): "
        "extend seed() and capture()"
    )

    single = replay(workload, one_row_at_a_time=name)
    set_based = replay(workload)

    assert single.written == [1] * sum(batches)  # each row wrote its one row
    assert set_based.tables == within_tolerance(single.tables)

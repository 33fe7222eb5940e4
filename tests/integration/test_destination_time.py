"""The kit and time: deadlines (with the clock skew allowance), retention (a key absent from the
ledger and issued longer ago than the retention is never run) and the probe, on a real
PostgreSQL and a real SQLite file, through the Python API with the service's clock in the
test's hands (the HTTP side is in test_destination_kit.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import pytest_asyncio

from effectusd.core.canonical import parse_json, sha256_hex
from effectusd.core.states import OutcomeClass
from effectusd.destination import (
    DEFAULT_CLOCK_SKEW,
    DEFAULT_RETENTION,
    EffectusRequest,
    PermanentFailure,
    Reply,
    connect_sqlite,
    handle,
    handle_sqlite,
    install_sqlite,
    install_sync,
    probe,
    probe_sqlite,
    prune_ledger,
    prune_ledger_sqlite,
)
from effectusd.destination.exchange import Exchange
from effectusd.destination.keys import forget_key
from tests.conftest import create_database, drop_database
from tests.integration.test_destination_kit import invocation, request_of

postgres = pytest.mark.postgres
BACKENDS = [pytest.param("postgresql", marks=postgres), "sqlite"]
SKEW = DEFAULT_CLOCK_SKEW
NOW = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)  # the service's clock, unless a test moves it


class Clock:
    """The service's clock: what ``handle`` reads as now, moved by the test."""

    def __init__(self, now: datetime = NOW) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


Then = Callable[[], None]  # what the mutation does once it has written (e.g. move the clock)


@dataclasses.dataclass
class Ledger:
    """The kit on one backend, called directly: answers, counts, prune, probe, forget."""

    backend: str
    url: str
    conn: Any

    async def answer(
        self,
        request: EffectusRequest,
        clock: Clock,
        then: Then | None = None,
        *,
        decline: bool = False,
    ) -> Reply:
        def finish() -> Any:
            if then is not None:
                then()
            if decline:
                raise PermanentFailure("declined", status=402)
            return {"attempt": request.attempt}

        if self.backend == "sqlite":

            def sync_mutation(conn: Any, request: EffectusRequest) -> Any:
                conn.execute("INSERT INTO effects (k) VALUES (?)", (request.idempotency_key,))
                return finish()

            return handle_sqlite(self.conn, request, sync_mutation, clock=clock)

        async def mutation(conn: Any, request: EffectusRequest) -> Any:
            await conn.execute("INSERT INTO effects (k) VALUES (%s)", (request.idempotency_key,))
            return finish()

        return await handle(self.conn, request, mutation, clock=clock)

    async def count(self, table: str) -> int:
        if self.backend == "sqlite":
            [(n,)] = self.conn.execute(f"SELECT count(*) FROM {table}").fetchall()
            return int(n)
        async with await psycopg.AsyncConnection.connect(self.url) as other:
            row = await (await other.execute(f"SELECT count(*) FROM {table}")).fetchone()
        assert row is not None
        return int(row[0])

    async def prune(self, before: datetime) -> int:
        if self.backend == "sqlite":
            return prune_ledger_sqlite(self.conn, before=before)
        return await prune_ledger(self.conn, before=before)

    async def probe(self, key: str) -> tuple[int, Any]:
        if self.backend == "sqlite":
            reply = probe_sqlite(self.conn, key)
        else:
            reply = await probe(self.conn, key)
        assert reply.outcome is None or reply.status == 400  # a probe names no outcome class
        return reply.status, parse_json(reply.body)


@pytest.fixture(scope="module")
def kit_url() -> Any:
    url = create_database("effectusd_kit_time")
    with psycopg.connect(url, autocommit=True) as conn:
        install_sync(conn)
        conn.execute("CREATE TABLE effects (id bigserial PRIMARY KEY, k text NOT NULL)")
    yield url
    drop_database(url)


@pytest_asyncio.fixture(params=BACKENDS, loop_scope="session")
async def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Ledger]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'kit.db'}"
        setup = connect_sqlite(url)
        install_sqlite(setup)
        setup.execute("CREATE TABLE effects (id INTEGER PRIMARY KEY, k TEXT NOT NULL) STRICT")
        setup.close()
        conn = connect_sqlite(url)
        try:
            yield Ledger("sqlite", url, conn)
        finally:
            conn.close()
        return
    url = request.getfixturevalue("kit_url")
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        tables = "effectus_dest_keys, effectus_dest_watermarks, effectus_dest_key_audit, effects"
        await conn.execute(f"TRUNCATE {tables}")
        await conn.set_autocommit(False)
        yield Ledger("postgresql", url, conn)


def key_of(name: str) -> str:
    return sha256_hex(name.encode())  # as invocation() makes it


def at(
    key: str = "k1",
    *,
    attempt: int = 1,
    deadline: datetime = NOW + timedelta(minutes=1),
    issued: datetime | None = NOW,
) -> EffectusRequest:
    """A request as the daemon sends it, its deadline and issue time by the test's clock."""
    inv = invocation(key, attempt=attempt, deadline=deadline)
    return request_of(dataclasses.replace(inv, key_issued_at=issued))


# --- deadlines --------------------------------------------------------------------------------


@pytest.mark.parametrize("past", [timedelta(microseconds=1), timedelta(hours=1)])
async def test_a_new_key_arriving_past_its_deadline_plus_the_skew_runs_nothing_and_says_so(
    ledger: Ledger, past: timedelta
) -> None:
    request = at(deadline=NOW - SKEW - past)
    reply = await ledger.answer(request, Clock())
    assert (reply.status, reply.outcome) == (503, OutcomeClass.RETRYABLE)
    assert "X-Effectus-Deadline" in parse_json(reply.body)["error"]
    assert await ledger.count("effects") == 0
    assert await ledger.count("effectus_dest_keys") == 0


async def test_a_request_late_only_within_the_skew_allowance_still_runs(ledger: Ledger) -> None:
    request = at(deadline=NOW - SKEW)
    reply = await ledger.answer(request, Clock())
    assert reply.status == 200
    assert await ledger.count("effects") == 1


async def test_a_mutation_that_would_commit_past_the_deadline_rolls_back_and_runs_afresh(
    ledger: Ledger,
) -> None:
    clock = Clock()
    deadline = NOW + timedelta(seconds=30)
    late = at(deadline=deadline)

    def overrun() -> None:
        clock.now = deadline + SKEW + timedelta(microseconds=1)

    reply = await ledger.answer(late, clock, overrun)
    assert (reply.status, reply.outcome) == (503, OutcomeClass.RETRYABLE)
    assert await ledger.count("effects") == 0  # the mutation's writes rolled back
    assert await ledger.count("effectus_dest_keys") == 0  # and the key: nothing committed
    retry = at(attempt=2, deadline=clock.now + timedelta(seconds=30))
    assert (await ledger.answer(retry, clock)).status == 200
    assert await ledger.count("effects") == 1


async def test_a_refusal_that_would_be_stored_past_the_deadline_is_not_stored(
    ledger: Ledger,
) -> None:
    clock = Clock()
    deadline = NOW + timedelta(seconds=30)

    def overrun() -> None:
        clock.now = deadline + SKEW + timedelta(seconds=1)

    request = at(deadline=deadline)
    reply = await ledger.answer(request, clock, overrun, decline=True)
    assert (reply.status, reply.outcome) == (503, OutcomeClass.RETRYABLE)
    assert await ledger.count("effectus_dest_keys") == 0


async def test_a_late_request_for_a_committed_key_gets_the_stored_answer(ledger: Ledger) -> None:
    first = await ledger.answer(at(), Clock())
    late = at(attempt=2, deadline=NOW - timedelta(hours=1))
    again = await ledger.answer(late, Clock())
    assert (again.status, again.replayed, again.body) == (200, True, first.body)
    assert await ledger.count("effects") == 1


# --- retention --------------------------------------------------------------------------------


async def test_a_pruned_key_asked_again_after_the_retention_is_refused_unknown_never_rerun(
    ledger: Ledger,
) -> None:
    # The measured defect: a retry of a pruned key ran the mutation a second time.
    issued = NOW
    first = at(issued=issued)
    assert (await ledger.answer(first, Clock())).status == 200
    later = Clock(NOW + DEFAULT_RETENTION + timedelta(hours=1))
    assert await ledger.prune(before=later.now) == 1
    retry = at(attempt=2, deadline=later.now + timedelta(minutes=1), issued=issued)
    reply = await ledger.answer(retry, later)
    assert (reply.status, reply.outcome) == (410, OutcomeClass.UNKNOWN)
    assert "X-Effectus-Key-Issued-At" in parse_json(reply.body)["error"]
    assert await ledger.count("effects") == 1
    assert await ledger.count("effectus_dest_keys") == 0


@pytest.mark.parametrize(
    ("age", "runs"),
    [
        (DEFAULT_RETENTION - SKEW - timedelta(milliseconds=1), True),
        (DEFAULT_RETENTION - SKEW + timedelta(milliseconds=1), False),
        (timedelta(days=400), False),
    ],
)
async def test_an_absent_key_runs_only_while_its_issue_time_is_within_retention_less_skew(
    ledger: Ledger, age: timedelta, runs: bool
) -> None:
    request = at(issued=NOW - age)
    reply = await ledger.answer(request, Clock())
    assert reply.status == (200 if runs else 410)
    assert await ledger.count("effects") == int(runs)


async def test_a_request_without_an_issue_time_is_not_checked_against_retention(
    ledger: Ledger,
) -> None:
    assert (await ledger.answer(at(issued=None), Clock())).status == 200
    assert await ledger.count("effects") == 1


async def test_a_key_forgotten_by_an_operator_runs_again_however_old_its_issue_time(
    ledger: Ledger,
) -> None:
    issued = datetime.now(UTC) - DEFAULT_RETENTION - timedelta(days=1)
    soon = datetime.now(UTC) + timedelta(minutes=5)
    early = Clock(issued + timedelta(minutes=1))
    declined = at(deadline=early.now + timedelta(minutes=1), issued=issued)
    assert (await ledger.answer(declined, early, decline=True)).status == 402
    forget_key(ledger.url, key_of("k1"), evidence="card replaced", actor="ops")
    retry = at(attempt=2, deadline=soon, issued=issued)
    # The forget (today, by the database clock) re-issued the key: the retry runs.
    assert (await ledger.answer(retry, Clock(datetime.now(UTC)))).status == 200
    assert await ledger.count("effects") == 1


def test_a_retention_no_longer_than_the_skew_is_refused() -> None:
    with pytest.raises(ValueError, match="retention: must be longer than clock_skew"):
        Exchange(at(), retention=SKEW, clock_skew=SKEW)


# --- the probe ------------------------------------------------------------------------------


async def test_probe_answers_committed_or_refused_with_the_stored_answer_and_unknown_otherwise(
    ledger: Ledger,
) -> None:
    ok = await ledger.answer(at("ok"), Clock())
    await ledger.answer(at("no"), Clock(), decline=True)
    assert await ledger.probe(key_of("ok")) == (
        200,
        {
            "key": key_of("ok"),
            "state": "committed",
            "answer": {
                "status": 200,
                "outcome": None,
                "fencing_acknowledged": False,
                "body": parse_json(ok.body),
            },
        },
    )
    status, document = await ledger.probe(key_of("no"))
    assert (status, document["state"]) == (422, "refused")  # never a 2xx: it took no effect
    assert document["answer"]["status"] == 402
    assert document["answer"]["outcome"] == "permanent_failure"
    assert document["answer"]["body"] == {"error": "declined"}
    assert await ledger.probe(key_of("never")) == (
        404,
        {"key": key_of("never"), "state": "unknown"},
    )


async def test_probe_of_a_key_rolled_back_past_its_deadline_is_unknown(ledger: Ledger) -> None:
    clock = Clock()

    def overrun() -> None:
        clock.now = NOW + timedelta(hours=1)

    late = at(deadline=NOW + timedelta(seconds=1))
    assert (await ledger.answer(late, clock, overrun)).status == 503
    assert (await ledger.probe(key_of("k1")))[1]["state"] == "unknown"


async def test_probe_refuses_a_key_that_is_not_an_idempotency_key_naming_the_parameter(
    ledger: Ledger,
) -> None:
    status, document = await ledger.probe("secret-not-a-key")
    assert status == 400
    assert document == {"error": "key: expected 64 lowercase hex digits"}

"""The probe row's plain destination (tests/chaos/lookup_destination.py) over real HTTP and a
real PostgreSQL: it dedupes by key, never commits past the deadline plus its allowance, and its
lookup tells committed, in progress and unknown apart."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest
from aiohttp import web
from psycopg_pool import AsyncConnectionPool

from tests.chaos.lookup_destination import LOCK, NOT_COMMITTED, OUTCOME, build_app, install

pytestmark = pytest.mark.postgres

SKEW = timedelta(seconds=5)
NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
KEY = "a" * 64


@dataclass
class Service:
    client: httpx.AsyncClient
    url: str
    times: list[datetime]  # the service's clock: the next readings, the last one sticks

    def effects(self, key: str = KEY) -> int:
        with psycopg.connect(self.url) as conn:
            row = conn.execute(
                "SELECT count(*) FROM lookup_effects WHERE idempotency_key = %s", (key,)
            ).fetchone()
        assert row is not None
        return int(row[0])

    async def call(
        self, deadline: datetime = NOW, arguments: Any = None, key: str = KEY
    ) -> httpx.Response:
        headers = {"Idempotency-Key": key, "X-Effectus-Deadline": deadline.isoformat()}
        body = json.dumps(arguments if arguments is not None else {"i": 1})
        return await self.client.post("/orders", content=body, headers=headers)


def _clock(times: list[datetime]) -> Callable[[], datetime]:
    def now() -> datetime:
        return times.pop(0) if len(times) > 1 else times[0]

    return now


@pytest.fixture
def times() -> list[datetime]:
    return [NOW]


@pytest.fixture
async def service(empty_database: str, times: list[datetime]) -> AsyncIterator[Service]:
    async with AsyncConnectionPool(
        empty_database, min_size=1, max_size=4, kwargs={"autocommit": True}
    ) as pool:
        await install(pool)
        runner = web.AppRunner(build_app(pool, clock_skew=SKEW, clock=_clock(times)))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                yield Service(client, empty_database, times)
        finally:
            await runner.cleanup()


async def test_a_key_sent_again_gets_its_stored_answer_and_acts_once(service: Service) -> None:
    first = await service.call()
    again = await service.call(deadline=NOW - timedelta(hours=1))  # answered whatever the time
    assert first.status_code == again.status_code == 200
    assert first.json() == again.json() == {"ok": True, "key": KEY}
    assert service.effects() == 1


async def test_a_refusal_is_stored_and_replayed_as_a_permanent_failure(service: Service) -> None:
    first = await service.call(arguments={"fail": True})
    again = await service.call(arguments={"fail": True})
    assert first.status_code == again.status_code == 422
    assert first.headers[OUTCOME] == again.headers[OUTCOME] == "permanent_failure"
    assert service.effects() == 0
    found = await service.client.get(f"/lookup/{KEY}")  # it never took effect
    assert (found.status_code, found.json()) == (
        422,
        {"key": KEY, "state": "refused", "status": 422, "body": {"error": "declined"}},
    )


async def test_a_request_past_its_deadline_and_the_allowance_runs_nothing(
    service: Service,
) -> None:
    within = await service.call(deadline=NOW - SKEW, key="b" * 64)  # at the edge: still on
    late = await service.call(deadline=NOW - SKEW - timedelta(milliseconds=1))
    assert within.status_code == 200
    assert (late.status_code, late.headers[OUTCOME]) == (503, NOT_COMMITTED)
    assert service.effects() == 0
    assert (await service.client.get(f"/lookup/{KEY}")).status_code == 404


async def test_a_commit_that_would_land_past_the_deadline_rolls_back(service: Service) -> None:
    # on time when the request arrives, past the allowance when it is about to commit
    service.times[:] = [NOW, NOW + SKEW + timedelta(seconds=1)]
    reply = await service.call(deadline=NOW)
    assert (reply.status_code, reply.headers[OUTCOME]) == (503, NOT_COMMITTED)
    assert service.effects() == 0
    assert (await service.client.get(f"/lookup/{KEY}")).status_code == 404


async def test_the_lookup_says_committed_with_the_answer_or_unknown(service: Service) -> None:
    unknown = await service.client.get(f"/lookup/{KEY}")
    assert (unknown.status_code, unknown.json()) == (404, {"key": KEY, "state": "unknown"})
    await service.call()
    found = await service.client.get(f"/lookup/{KEY}")
    assert found.status_code == 200
    body = {"ok": True, "key": KEY}
    assert found.json() == {"key": KEY, "state": "committed", "status": 200, "body": body}


async def test_the_lookup_says_in_progress_while_a_request_holds_the_key(
    service: Service,
) -> None:
    with psycopg.connect(service.url) as conn:  # a request's transaction, still open
        conn.execute(LOCK, (KEY,))
        busy = await service.client.get(f"/lookup/{KEY}")
    assert (busy.status_code, busy.json()) == (409, {"key": KEY, "state": "in_progress"})
    assert (await service.client.get(f"/lookup/{KEY}")).status_code == 404

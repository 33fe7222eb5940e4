"""A plain destination that honours deadlines and offers a lookup, written without the
destination kit, as a payment or order API would be (issue 30's probe row, tests/chaos/probes.py).

    python -m tests.chaos.lookup_destination --port 0 --database-url URL
        [--clock-skew 5] [--stall-after-commit 0.1] [--reset-after-commit 0.1]

POST /{anything}: in one PostgreSQL transaction, under a lock on the Idempotency-Key: a key
already stored gets its stored answer again (nothing runs); a request arriving past its
X-Effectus-Deadline plus the clock skew allowance is refused (503, known not committed,
nothing stored); otherwise the business effect (one row in lookup_effects; {"fail": true}
arguments refuse it, 422, and the refusal is stored instead) and the answer are written, and
the clock is read once more before COMMIT: past the deadline plus the allowance the
transaction rolls back and answers 503 too. So nothing commits under a key after its deadline
plus the allowance, which is what ``honours_deadline = true`` declares.

GET /lookup/{key}: 200 {"key", "state": "committed", "status", "body"} with the stored answer
of a key that took effect; 422 ("refused") with the stored refusal of one that never will;
409 while a request under the key holds its lock (its transaction may still commit); 404
unknown otherwise.

--stall-after-commit / --reset-after-commit: after a commit, that share of answers never
arrives (silence past any timeout, or a reset connection), so the caller cannot know.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web
from psycopg_pool import AsyncConnectionPool

SCHEMA = """
CREATE TABLE IF NOT EXISTS lookup_answers (
    idempotency_key text PRIMARY KEY, status integer NOT NULL, body text NOT NULL,
    committed_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS lookup_effects (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    idempotency_key text NOT NULL, path text NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);
"""
LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 30))"
TRY_LOCK = "SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 30))"
SELECT_ANSWER = "SELECT status, body FROM lookup_answers WHERE idempotency_key = %s"
INSERT_EFFECT = "INSERT INTO lookup_effects (idempotency_key, path) VALUES (%s, %s)"
INSERT_ANSWER = "INSERT INTO lookup_answers (idempotency_key, status, body) VALUES (%s, %s, %s)"
OUTCOME = "X-Effectus-Outcome"
NOT_COMMITTED = "retryable_failure_known_not_committed"
Clock = Callable[[], datetime]


class TooLate(Exception):
    """The deadline plus the allowance passed: roll back, answer known not committed."""


def wall_clock() -> datetime:
    return datetime.now(UTC)


def _json(status: int, body: Any, outcome: str | None = None) -> web.Response:
    headers = {OUTCOME: outcome} if outcome else {}
    return web.json_response(body, status=status, headers=headers)


def build_app(
    pool: AsyncConnectionPool[Any],
    *,
    clock_skew: timedelta = timedelta(seconds=5),
    clock: Clock = wall_clock,
    stall: float = 0.0,
    reset: float = 0.0,
) -> web.Application:
    """The service over ``pool`` (autocommit connections, SCHEMA installed)."""

    def late(deadline: datetime) -> bool:
        return clock() > deadline + clock_skew

    async def call(request: web.Request) -> web.StreamResponse:
        key = request.headers.get("Idempotency-Key", "")
        try:
            deadline = datetime.fromisoformat(request.headers["X-Effectus-Deadline"])
            arguments = json.loads(await request.read())
        except (KeyError, ValueError):
            return _json(400, {"error": "Idempotency-Key, X-Effectus-Deadline and a JSON body"})
        if not key or deadline.tzinfo is None:
            return _json(400, {"error": "Idempotency-Key, X-Effectus-Deadline and a JSON body"})
        try:
            async with pool.connection() as conn, conn.transaction():
                await conn.execute(LOCK, (key,))
                stored = await (await conn.execute(SELECT_ANSWER, (key,))).fetchone()
                if stored is not None:
                    status, body = stored[0], json.loads(stored[1])
                else:
                    if late(deadline):
                        raise TooLate
                    if isinstance(arguments, dict) and arguments.get("fail"):
                        status, body = 422, {"error": "declined"}
                    else:
                        await conn.execute(INSERT_EFFECT, (key, request.path))
                        status, body = 200, {"ok": True, "key": key}
                    await conn.execute(INSERT_ANSWER, (key, status, json.dumps(body)))
                    if late(deadline):  # the last look before COMMIT
                        raise TooLate
        except TooLate:
            message = "past X-Effectus-Deadline with the clock skew allowance; nothing was done"
            return _json(503, {"error": message}, NOT_COMMITTED)
        roll = random.random()
        if roll < reset and request.transport is not None:
            request.transport.abort()  # committed, then the connection is reset
            raise ConnectionResetError
        if roll < reset + stall:
            await asyncio.sleep(30)  # committed, then silence past any timeout
        return _json(status, body, "permanent_failure" if status == 422 else None)

    async def lookup(request: web.Request) -> web.StreamResponse:
        key = request.match_info["key"]
        async with pool.connection() as conn, conn.transaction():
            (free,) = await (await conn.execute(TRY_LOCK, (key,))).fetchone()
            if not free:
                return _json(409, {"key": key, "state": "in_progress"})
            stored = await (await conn.execute(SELECT_ANSWER, (key,))).fetchone()
        if stored is None:
            return _json(404, {"key": key, "state": "unknown"})
        status, body = stored[0], json.loads(stored[1])
        if status >= 300:  # refused: it never took effect, and asked again it is refused again
            return _json(422, {"key": key, "state": "refused", "status": status, "body": body})
        return _json(200, {"key": key, "state": "committed", "status": status, "body": body})

    app = web.Application()
    app.router.add_get("/lookup/{key}", lookup)
    app.router.add_post("/{path:.*}", call)
    return app


async def install(pool: AsyncConnectionPool[Any]) -> None:
    async with pool.connection() as conn:
        await conn.execute(SCHEMA)


async def main(args: argparse.Namespace) -> None:
    async with AsyncConnectionPool(
        args.database_url, min_size=2, max_size=16, kwargs={"autocommit": True}
    ) as pool:
        await install(pool)
        app = build_app(
            pool,
            clock_skew=timedelta(seconds=args.clock_skew),
            stall=args.stall_after_commit,
            reset=args.reset_after_commit,
        )
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", args.port)
        await site.start()
        port = runner.addresses[0][1]
        print("ready", port, flush=True)  # the port, if 0
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True, help="0 picks a free port")
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--clock-skew", type=float, default=5.0, help="seconds")
    parser.add_argument("--stall-after-commit", type=float, default=0.0)
    parser.add_argument("--reset-after-commit", type=float, default=0.0)
    asyncio.run(main(parser.parse_args()))

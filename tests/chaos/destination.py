"""The chaos suite's destination: a raw asyncio HTTP server, so it can misbehave on the wire
after committing (stall past the caller's timeout, or reset the connection).

    python -m tests.chaos.destination --port P --database-url URL --mode kit|plain
        [--stall-after-commit 0.1] [--reset-after-commit 0.1]
        [--retention SECONDS [--clock-skew SECONDS] [--withhold-issued-at]]

kit:   honours the destination contract through effectusd.destination; each business
       mutation is one row in chaos_mutations, written in the kit's transaction.
plain: honours nothing (the control); every request it receives is a row in chaos_received
       (in kit mode too with --log-received). A mutation's fencing tokens: chaos_fence_log.
Arguments {"fail": true} make the forward call fail permanently (to exercise compensation).
--retention: the kit keeps answers that long (tests/chaos/retention.py prunes its ledger);
--withhold-issued-at drops X-Effectus-Key-Issued-At before the kit reads the request, as from
a daemon that predates it (that row's control: a pruned key then runs again).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
from datetime import timedelta
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from effectusd.core.wire import KEY_ISSUED_AT
from effectusd.destination import (
    DEFAULT_CLOCK_SKEW,
    DEFAULT_RETENTION,
    PermanentFailure,
    ProtocolError,
    handle,
    install,
    parse_request,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS chaos_mutations (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    idempotency_key text NOT NULL, saga_id text NOT NULL, effect_id text NOT NULL,
    direction text NOT NULL, attempt integer NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS chaos_fence_log (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    resource text NOT NULL, token bigint NOT NULL, idempotency_key text NOT NULL
);
CREATE TABLE IF NOT EXISTS chaos_received (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    idempotency_key text NOT NULL, saga_id text NOT NULL, effect_id text NOT NULL,
    direction text NOT NULL, attempt integer NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);
"""
INSERT_MUTATION = (
    "INSERT INTO chaos_mutations (idempotency_key, saga_id, effect_id, direction, attempt)"
    " VALUES (%s, %s, %s, %s, %s)"
)
INSERT_RECEIVED = INSERT_MUTATION.replace("chaos_mutations", "chaos_received")
# Each mutation's fencing tokens, in the kit's transaction: per resource, in the order the
# watermark's row lock let them commit (tests/failover checks they strictly increase).
INSERT_FENCE = "INSERT INTO chaos_fence_log (resource, token, idempotency_key) VALUES (%s, %s, %s)"


class Server:
    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        mode: str,
        stall: float,
        reset: float,
        received: bool = False,
        retention: timedelta = DEFAULT_RETENTION,
        clock_skew: timedelta = DEFAULT_CLOCK_SKEW,
        withhold_issued_at: bool = False,
    ) -> None:
        self.pool, self.mode, self.stall, self.reset = pool, mode, stall, reset
        self.received = received  # kit mode: also keep a row per request received
        self.retention, self.clock_skew = retention, clock_skew
        self.withhold_issued_at = withhold_issued_at

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        name, value = line.split(":", 1)
                        headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                status, payload, extra = await self.answer(headers, body)
                roll = random.random()
                if roll < self.reset:
                    writer.transport.abort()  # committed, then the connection is reset
                    return
                if roll < self.reset + self.stall:
                    await asyncio.sleep(30)  # committed, then silence past any timeout
                    return
                text = json.dumps(payload).encode()
                head_out = [
                    f"HTTP/1.1 {status} X",
                    "Content-Type: application/json",
                    f"Content-Length: {len(text)}",
                    *extra,
                ]
                writer.write(("\r\n".join(head_out) + "\r\n\r\n").encode() + text)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def answer(self, headers: dict[str, str], body: bytes) -> tuple[int, Any, list[str]]:
        if self.mode == "plain":
            async with self.pool.connection() as conn:
                await conn.execute(INSERT_RECEIVED, _identity(headers))
            if json.loads(body).get("fail") and headers["x-effectus-direction"] == "forward":
                return 422, {"error": "no"}, ["X-Effectus-Outcome: permanent_failure"]
            return 200, {"ok": True}, []
        if self.received:  # every request that reached the kit, replays included
            async with self.pool.connection() as conn:
                await conn.execute(INSERT_RECEIVED, _identity(headers))
        if self.withhold_issued_at:
            headers.pop(KEY_ISSUED_AT.lower(), None)
        try:
            request = parse_request(headers, body)
        except ProtocolError as exc:
            reply = exc.reply()
        else:
            async with self.pool.connection() as conn:
                reply = await handle(
                    conn,
                    request,
                    mutate,
                    retention=self.retention,
                    clock_skew=self.clock_skew,
                )
        extra = []
        if reply.outcome is not None:
            extra.append(f"X-Effectus-Outcome: {reply.outcome.value}")
        if reply.fencing_acknowledged:
            extra.append("X-Effectus-Fencing: acknowledged")
        return reply.status, json.loads(reply.body or b"null"), extra


async def mutate(conn: psycopg.AsyncConnection[Any], request: Any) -> Any:
    if request.arguments.get("fail") and request.direction == "forward":
        raise PermanentFailure("declined")
    for grant in request.fencing_grants:
        await conn.execute(INSERT_FENCE, (grant.resource, grant.token, request.idempotency_key))
    await conn.execute(
        INSERT_MUTATION,
        (
            request.idempotency_key,
            request.saga_id,
            request.effect_id,
            request.direction.value,
            request.attempt,
        ),
    )
    return {"ok": True}


def _identity(headers: dict[str, str]) -> tuple[str, str, str, str, int]:
    return (
        headers["idempotency-key"],
        headers["x-effectus-saga-id"],
        headers["x-effectus-effect-id"],
        headers["x-effectus-direction"],
        int(headers["x-effectus-attempt"]),
    )


async def main(args: argparse.Namespace) -> None:
    async with await psycopg.AsyncConnection.connect(args.database_url, autocommit=True) as conn:
        await conn.execute(SCHEMA)
        if args.mode == "kit":
            await install(conn)
    async with AsyncConnectionPool(
        args.database_url, min_size=2, max_size=16, kwargs={"autocommit": True}
    ) as pool:
        server = Server(
            pool,
            args.mode,
            args.stall_after_commit,
            args.reset_after_commit,
            args.log_received,
            timedelta(seconds=args.retention) if args.retention else DEFAULT_RETENTION,
            timedelta(seconds=args.clock_skew) if args.clock_skew else DEFAULT_CLOCK_SKEW,
            args.withhold_issued_at,
        )
        listener = await asyncio.start_server(server.connection, "127.0.0.1", args.port)
        print("ready", listener.sockets[0].getsockname()[1], flush=True)  # the port, if 0
        async with listener:
            await listener.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True, help="0 picks a free port")
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--mode", choices=["kit", "plain"], default="kit")
    parser.add_argument("--stall-after-commit", type=float, default=0.0)
    parser.add_argument("--reset-after-commit", type=float, default=0.0)
    parser.add_argument("--log-received", action="store_true", help="kit: a row per request")
    parser.add_argument("--retention", type=float, default=0.0, help="kit: seconds (0: default)")
    parser.add_argument("--clock-skew", type=float, default=0.0, help="kit: seconds (0: default)")
    parser.add_argument("--withhold-issued-at", action="store_true", help="kit: as an old daemon")
    asyncio.run(main(parser.parse_args()))

"""The control for the kit shop: the same endpoints, honouring nothing of the contract.

No dedupe on Idempotency-Key, no argument-hash check, no fencing check: every request it
receives acts again and is appended to ``plain_requests`` (key, attempt, path, received_at),
so a test or the chaos suite can count how often one key was acted on. Compare with
contrib/kit_shop_service.py under the same faults.

    python contrib/plain_destination.py --port 8766 --database-url postgresql://.../plain
"""

from __future__ import annotations

import argparse
import json
import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn
from psycopg_pool import AsyncConnectionPool
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

CHARGE_LIMIT = 10_000

CREATE_TABLE = """CREATE TABLE IF NOT EXISTS plain_requests (
    id               bigserial PRIMARY KEY,
    idempotency_key  text,
    attempt          text,        -- as received: the control does not even parse it
    path             text NOT NULL,
    received_at      timestamptz NOT NULL DEFAULT now()
)"""
APPEND = "INSERT INTO plain_requests (idempotency_key, attempt, path) VALUES (%s, %s, %s)"


def _answer(path: str, args: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The shop's answers; every call is a fresh effect with a fresh id."""
    new = uuid.uuid4().hex[:12]
    if path == "/inventory/reserve":
        return 200, {"reservation_id": f"res-{new}"}
    if path == "/inventory/release":
        return 200, {"released": True}
    if path == "/payments/charge":
        amount = args.get("amount")
        if isinstance(amount, int | float) and amount > CHARGE_LIMIT:
            return 402, {"error": "declined"}
        return 200, {"charge_id": f"ch-{new}"}
    if path == "/payments/refund":
        return 200, {"refunded": True}
    return 200, {"tracking": f"trk-{new}"}  # /shipping/schedule


def build_app(database_url: str) -> Starlette:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(database_url, open=False)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await pool.open(wait=True)
        try:
            async with pool.connection() as conn:
                await conn.execute(CREATE_TABLE)
            yield
        finally:
            await pool.close()

    async def endpoint(request: Request) -> Response:
        body = await request.body()
        async with pool.connection() as conn:  # commits on leaving the block
            await conn.execute(
                APPEND,
                (
                    request.headers.get("idempotency-key"),
                    request.headers.get("x-effectus-attempt"),
                    request.url.path,
                ),
            )
        try:
            args = json.loads(body)
        except ValueError:
            return JSONResponse({"error": "body is not JSON"}, status_code=400)
        status, result = _answer(request.url.path, args if isinstance(args, dict) else {})
        headers = {"X-Effectus-Outcome": "permanent_failure"} if status != 200 else None
        return JSONResponse(result, status_code=status, headers=headers)

    paths = [
        "/inventory/reserve",
        "/inventory/release",
        "/payments/charge",
        "/payments/refund",
        "/shipping/schedule",
    ]
    app = Starlette(
        routes=[Route(path, endpoint, methods=["POST"]) for path in paths], lifespan=lifespan
    )
    app.state.pool = pool
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description="control destination: honours nothing")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8766, help="0 picks a free port")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("EFFECTUSD_DATABASE_URL"),
        help="database for plain_requests (default: $EFFECTUSD_DATABASE_URL)",
    )
    args = parser.parse_args()
    if not args.database_url:
        parser.error("--database-url is required (or set EFFECTUSD_DATABASE_URL)")
    uvicorn.run(build_app(args.database_url), host=args.host, port=args.port, log_level="info")


if __name__ == "__main__":
    main()

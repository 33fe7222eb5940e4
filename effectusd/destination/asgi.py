"""Serve kit-backed endpoints with Starlette (install the extra ``effectusd[destination]``).

Only this module imports Starlette, so the rest of the kit works in any framework.

    app = effectus_app(database_url, {"/payments/charge": charge})

or, inside an existing Starlette app with its own pool:

    Route("/payments/charge", effectus_endpoint(pool, charge), methods=["POST"])
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from effectusd.core.states import OutcomeClass
from effectusd.destination.ledger import DEFAULT_RETENTION, AsyncMutation, handle
from effectusd.destination.protocol import ProtocolError, parse_request
from effectusd.destination.replies import Reply, error_reply
from effectusd.destination.schema import install

DEFAULT_MAX_BODY_BYTES = 1 << 20
Endpoint = Callable[[Request], Awaitable[Response]]
Setup = Callable[[psycopg.AsyncConnection[Any]], Awaitable[None]]


def to_response(reply: Reply) -> Response:
    return Response(reply.body, status_code=reply.status, headers=reply.headers)


def effectus_endpoint(
    pool: AsyncConnectionPool[Any],
    mutation: AsyncMutation,
    *,
    retention: timedelta = DEFAULT_RETENTION,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> Endpoint:
    """A Starlette endpoint: verify the request, run ``mutation`` through ``handle`` on a
    connection from ``pool``, answer the reply. Unexpected errors propagate, so the server
    answers 500 without an outcome header: unknown, as it should be."""

    async def endpoint(request: Request) -> Response:
        body = await _read_capped(request, max_body_bytes)
        if body is None:
            message = f"body: larger than {max_body_bytes} bytes"
            return to_response(error_reply(413, OutcomeClass.PERMANENT, message))
        try:
            # Raw bytes: Starlette decodes header values as latin-1, the executor sends UTF-8.
            parsed = parse_request(request.headers.raw, body)
        except ProtocolError as exc:
            return to_response(exc.reply())
        try:
            conn = await pool.getconn()
        except PoolTimeout:
            message = "no database connection available; nothing was done"
            return to_response(error_reply(503, OutcomeClass.RETRYABLE, message))
        try:
            reply = await handle(conn, parsed, mutation, retention=retention)
        finally:
            await pool.putconn(conn)  # the pool discards a connection left broken
        return to_response(reply)

    return endpoint


def effectus_app(
    database_url: str,
    routes: Mapping[str, AsyncMutation],
    *,
    setup: Setup | None = None,
    retention: timedelta = DEFAULT_RETENTION,
    min_size: int = 1,
    max_size: int = 10,
    methods: tuple[str, ...] = ("POST",),
) -> Starlette:
    """An app serving each path with its mutation. At startup it opens a pool, installs the
    kit's tables and runs ``setup(conn)`` (e.g. the application's own tables)."""
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        database_url, min_size=min_size, max_size=max_size, open=False
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await pool.open(wait=True)
        try:
            async with pool.connection() as conn:
                await install(conn)
                if setup is not None:
                    async with conn.transaction():
                        await setup(conn)
            yield
        finally:
            await pool.close()

    app = Starlette(
        routes=[
            Route(path, effectus_endpoint(pool, mutation, retention=retention), methods=[*methods])
            for path, mutation in routes.items()
        ],
        lifespan=lifespan,
    )
    app.state.pool = pool
    return app


async def _read_capped(request: Request, limit: int) -> bytes | None:
    """The body, or None once it is known to exceed ``limit`` (never buffered past it)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)

"""Serve kit-backed endpoints with Starlette (install the extra ``effectusd[destination]``).

Only this module imports Starlette, so the rest of the kit works in any framework.

    app = effectus_app("sqlite:///shop.db", {"/payments/charge": charge})      # def charge
    app = effectus_app("postgresql://…/shop", {"/payments/charge": charge})    # async def charge

On SQLite a mutation is a plain function of ``(sqlite3.Connection, request)`` run in a worker
thread; on PostgreSQL it is a coroutine function of ``(psycopg.AsyncConnection, request)``.
Inside an existing Starlette app with its own pool:

    Route("/payments/charge", effectus_endpoint(pool, charge), methods=["POST"])

where ``pool`` is a psycopg ``AsyncConnectionPool`` (best created with
``check=AsyncConnectionPool.check_connection``, as ``effectus_app`` does) or a ``SqlitePool``.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import replace
from datetime import timedelta
from typing import Any, cast, overload

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from effectusd import tracing
from effectusd.backends.connections import AsyncPostgresConnection, SqliteConnection
from effectusd.backends.errors import DATABASE_ERRORS, conflict
from effectusd.backends.postgres.pool import AsyncPool, PoolTimeout, service_pool
from effectusd.core.database_url import SqliteDatabase, parse_database_url
from effectusd.core.states import OutcomeClass
from effectusd.destination.exchange import DEFAULT_CLOCK_SKEW
from effectusd.destination.ledger import DEFAULT_RETENTION, AsyncMutation, handle, probe
from effectusd.destination.protocol import (
    EffectusRequest,
    ProtocolError,
    parse_request,
    request_id_of,
)
from effectusd.destination.replies import Reply, error_reply
from effectusd.destination.schema import install, install_sqlite
from effectusd.destination.sqlite import (
    SqliteMutation,
    handle_sqlite,
    probe_sqlite,
    write_transaction,
)
from effectusd.destination.sqlite_pool import SqlitePool, SqlitePoolTimeout

DEFAULT_MAX_BODY_BYTES = 1 << 20
Endpoint = Callable[[Request], Awaitable[Response]]
Setup = Callable[[AsyncPostgresConnection], Awaitable[None]]
SqliteSetup = Callable[[SqliteConnection], None]
_Answer = Callable[[EffectusRequest], Awaitable[Reply]]
_NO_CONNECTION = "no database connection available; nothing was done"
_BUSY = "the database stayed busy; ask again"
DEFAULT_PROBE_MOUNT = "/effectus"  # effectus_app serves GET /effectus/keys/{key}


def to_response(reply: Reply, request_id: str | None = None) -> Response:
    """``reply`` on the wire, echoing ``request_id`` unless the reply already names one."""
    if reply.request_id is None and request_id is not None:
        reply = replace(reply, request_id=request_id)
    return Response(reply.body, status_code=reply.status, headers=reply.headers)


@overload
def effectus_endpoint(
    pool: AsyncPool,
    mutation: AsyncMutation,
    *,
    retention: timedelta = ...,
    clock_skew: timedelta = ...,
    max_body_bytes: int = ...,
    tracer_provider: object | None = ...,
) -> Endpoint: ...
@overload
def effectus_endpoint(
    pool: SqlitePool,
    mutation: SqliteMutation,
    *,
    retention: timedelta = ...,
    clock_skew: timedelta = ...,
    max_body_bytes: int = ...,
    tracer_provider: object | None = ...,
) -> Endpoint: ...
def effectus_endpoint(
    pool: AsyncPool | SqlitePool,
    mutation: AsyncMutation | SqliteMutation,
    *,
    retention: timedelta = DEFAULT_RETENTION,
    clock_skew: timedelta = DEFAULT_CLOCK_SKEW,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    tracer_provider: object | None = None,
) -> Endpoint:
    """A Starlette endpoint: verify the request, run ``mutation`` under the contract on a
    connection from ``pool``, answer the reply. Unexpected errors propagate, so the server
    answers 500 without an outcome header: unknown, as it should be.

    With the ``otel`` extra installed, a verified request runs under a SERVER span that
    continues the daemon's attempt span (``tracer_provider``, else the global one).
    ``retention`` and ``clock_skew``: see effectusd.destination.exchange."""
    if isinstance(pool, SqlitePool):
        _require_plain_function(mutation, "the mutation")
        answer = _sqlite_answer(pool, cast(SqliteMutation, mutation), retention, clock_skew)
    else:
        answer = _postgres_answer(pool, cast(AsyncMutation, mutation), retention, clock_skew)

    async def endpoint(request: Request) -> Response:
        # Raw bytes: Starlette decodes header values as latin-1, the executor sends UTF-8.
        echo = request_id_of(request.headers.raw)
        body = await _read_capped(request, max_body_bytes)
        if body is None:
            message = f"body: larger than {max_body_bytes} bytes"
            return to_response(error_reply(413, OutcomeClass.PERMANENT, message), echo)
        try:
            parsed = parse_request(request.headers.raw, body)
        except ProtocolError as exc:
            return to_response(exc.reply(), echo)
        name = f"effectusd.destination {parsed.verb}"
        attributes = _span_attributes(parsed)
        with tracing.server_span(name, parsed.trace_headers, attributes, tracer_provider) as span:
            reply = await answer(parsed)
            if span is not None:
                _answered(span, reply)
        return to_response(reply, echo)

    return endpoint


def _span_attributes(parsed: EffectusRequest) -> dict[str, str | int]:
    """Ids and classes only, never the arguments."""
    return {
        "effectusd.saga_id": parsed.saga_id,
        "effectusd.effect_id": parsed.effect_id,
        "effectusd.direction": parsed.direction.value,
        "effectusd.attempt": parsed.attempt,
        "effectusd.verb": parsed.verb,
        "effectusd.request_id": parsed.request_id,
    }


def _answered(span: tracing.Span, reply: Reply) -> None:
    span.set({"http.response.status_code": reply.status, "effectusd.replayed": reply.replayed})
    if reply.outcome is not None:
        span.set({"effectusd.outcome": reply.outcome.value})
        span.fail(reply.outcome.value)


def _postgres_answer(
    pool: AsyncPool, mutation: AsyncMutation, retention: timedelta, clock_skew: timedelta
) -> _Answer:
    async def answer(parsed: EffectusRequest) -> Reply:
        try:
            conn = await pool.getconn()
        except PoolTimeout:
            return error_reply(503, OutcomeClass.RETRYABLE, _NO_CONNECTION)
        try:
            return await handle(conn, parsed, mutation, retention=retention, clock_skew=clock_skew)
        finally:
            await pool.putconn(conn)  # the pool discards a connection left broken

    return answer


def _sqlite_answer(
    pool: SqlitePool, mutation: SqliteMutation, retention: timedelta, clock_skew: timedelta
) -> _Answer:
    def run(conn: SqliteConnection, parsed: EffectusRequest) -> Reply:
        return handle_sqlite(conn, parsed, mutation, retention=retention, clock_skew=clock_skew)

    async def answer(parsed: EffectusRequest) -> Reply:
        try:
            return await pool.run(lambda conn: run(conn, parsed))
        except SqlitePoolTimeout:
            return error_reply(503, OutcomeClass.RETRYABLE, _NO_CONNECTION)

    return answer


def effectus_probe(pool: AsyncPool | SqlitePool) -> Endpoint:
    """A Starlette endpoint for ``GET <mount>/keys/{key}``: what the ledger knows of the key
    (effectusd.destination.probe). It shows stored answers as a replay would: mount it where
    the service's mutations are, behind the same authentication if they have one."""

    async def endpoint(request: Request) -> Response:
        key = request.path_params["key"]
        try:
            if isinstance(pool, SqlitePool):
                reply = await pool.run(lambda conn: probe_sqlite(conn, key))
            else:
                async with pool.connection() as conn:
                    reply = await probe(conn, key)
        except (PoolTimeout, SqlitePoolTimeout):
            reply = error_reply(503, OutcomeClass.RETRYABLE, _NO_CONNECTION)
        except DATABASE_ERRORS as exc:
            if not conflict(exc):  # SQLite's busy timeout, PostgreSQL's serialization failure
                raise
            reply = error_reply(503, OutcomeClass.RETRYABLE, _BUSY)
        return to_response(reply)

    return endpoint


def effectus_app(
    database_url: str,
    routes: Mapping[str, AsyncMutation] | Mapping[str, SqliteMutation],
    *,
    setup: Setup | SqliteSetup | None = None,
    retention: timedelta = DEFAULT_RETENTION,
    clock_skew: timedelta = DEFAULT_CLOCK_SKEW,
    probe_mount: str | None = DEFAULT_PROBE_MOUNT,
    min_size: int = 1,
    max_size: int = 10,
    methods: tuple[str, ...] = ("POST",),
    tracer_provider: object | None = None,
) -> Starlette:
    """An app serving each path with its mutation. At startup it installs the kit's tables,
    then runs ``setup(conn)`` (e.g. the application's own tables) in a transaction.

    ``database_url``: ``sqlite:///relative.db``, ``sqlite:////absolute.db`` or a PostgreSQL
    URL. On PostgreSQL the routes and ``setup`` are coroutine functions and ``min_size`` /
    ``max_size`` bound the connection pool; on SQLite they are plain functions, run in
    ``max_size`` worker threads with a connection each (``min_size`` does not apply).
    ``tracer_provider``: see ``effectus_endpoint``. ``probe_mount``: the prefix of the
    ``GET {probe_mount}/keys/{key}`` route (``effectus_probe``); None serves none.
    """
    database = parse_database_url(database_url)
    if isinstance(database, SqliteDatabase):
        _require_plain_functions(routes, setup)
        sqlite_pool = SqlitePool(database.path, size=max_size)
        lifespan = _sqlite_lifespan(sqlite_pool, cast(SqliteSetup | None, setup))
        endpoints = {
            path: effectus_endpoint(
                sqlite_pool,
                cast(SqliteMutation, mutation),
                retention=retention,
                clock_skew=clock_skew,
                tracer_provider=tracer_provider,
            )
            for path, mutation in routes.items()
        }
        pool: SqlitePool | AsyncPool = sqlite_pool
    else:
        pg_pool = service_pool(database, min_size, max_size)
        lifespan = _postgres_lifespan(pg_pool, cast(Setup | None, setup))
        endpoints = {
            path: effectus_endpoint(
                pg_pool,
                cast(AsyncMutation, mutation),
                retention=retention,
                clock_skew=clock_skew,
                tracer_provider=tracer_provider,
            )
            for path, mutation in routes.items()
        }
        pool = pg_pool
    app = Starlette(routes=_served(endpoints, methods, pool, probe_mount), lifespan=lifespan)
    app.state.pool = pool
    return app


def _served(
    endpoints: Mapping[str, Any], methods: tuple[str, ...], pool: Any, probe_mount: str | None
) -> list[Route]:
    """A route per endpoint, and the probe's under ``probe_mount`` (None: no probe route)."""
    served = [Route(path, endpoint, methods=[*methods]) for path, endpoint in endpoints.items()]
    if probe_mount is not None:
        probe_path = f"{probe_mount.rstrip('/')}/keys/{{key}}"
        served.append(Route(probe_path, effectus_probe(pool), methods=["GET"]))
    return served


def _require_plain_functions(
    routes: Mapping[str, AsyncMutation] | Mapping[str, SqliteMutation],
    setup: Setup | SqliteSetup | None,
) -> None:
    """On SQLite every route's mutation and ``setup`` run in a worker thread: plain functions."""
    for path, mutation in routes.items():
        _require_plain_function(mutation, f"route {path}")
    if setup is not None:
        _require_plain_function(setup, "setup")


_Lifespan = Callable[[Starlette], AbstractAsyncContextManager[None]]


def _postgres_lifespan(pool: AsyncPool, setup: Setup | None) -> _Lifespan:
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

    return lifespan


def _sqlite_lifespan(pool: SqlitePool, setup: SqliteSetup | None) -> _Lifespan:
    def prepare(conn: SqliteConnection) -> None:
        install_sqlite(conn)
        if setup is not None:
            with write_transaction(conn):
                setup(conn)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with pool:
            await pool.run(prepare)
            yield

    return lifespan


def _require_plain_function(function: Callable[..., Any], what: str) -> None:
    if inspect.iscoroutinefunction(function):
        # Called from a worker thread it would return an unawaited coroutine, not a result.
        raise TypeError(
            f"{what}: on SQLite it must be a plain function of (sqlite3.Connection, …), "
            "not a coroutine function"
        )


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

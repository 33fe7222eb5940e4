"""The destination kit: honour effectusd's destination contract (docs/design.md section 9) in a
Python service on PostgreSQL or SQLite, atomically with the service's own business writes.

    from effectusd.destination import install, parse_request, handle, PermanentFailure

    await install(conn)                      # once, at startup: the kit's tables
    request = parse_request(headers, body)   # ProtocolError -> answer error.reply() (400)
    reply = await handle(conn, request, charge)

    async def charge(conn, request):
        if request.arguments["amount"] > LIMIT:
            raise PermanentFailure("declined", status=402)
        await conn.execute(INSERT_CHARGE, request.arguments)  # commits with the ledger row
        return {"charge_id": ...}

On SQLite the same contract, over a ``sqlite3`` connection and a plain (sync) mutation:

    conn = connect_sqlite("sqlite:///shop.db")   # WAL, busy timeout, foreign keys
    install_sqlite(conn)
    reply = handle_sqlite(conn, request, charge)  # def charge(conn, request): ...

and ``SqlitePool`` runs that in worker threads for async code. ``probe(conn, key)`` (and
``probe_sqlite``) says what the ledger knows of a key: committed with its answer, in progress,
or unknown. Deadlines are enforced with ``clock_skew`` and keys issued before ``retention``
are never run (docs/design.md section 9). Starlette helpers live in
``effectusd.destination.asgi`` (extra ``destination``); ``effectus_app`` takes either URL.
"""

from effectusd.core.database_url import (
    Database,
    DatabaseURLError,
    PostgresDatabase,
    SqliteDatabase,
    parse_database_url,
)
from effectusd.destination.exchange import DEFAULT_CLOCK_SKEW
from effectusd.destination.ledger import (
    DEFAULT_RETENTION,
    AsyncMutation,
    SyncMutation,
    handle,
    handle_sync,
    probe,
    prune_ledger,
    prune_ledger_sync,
)
from effectusd.destination.protocol import (
    EffectusRequest,
    FencingGrant,
    ProtocolError,
    parse_request,
)
from effectusd.destination.replies import PermanentFailure, Reply, RetryableFailure
from effectusd.destination.schema import SchemaError, install, install_sqlite, install_sync
from effectusd.destination.sqlite import (
    DEFAULT_BUSY_TIMEOUT,
    SqliteMutation,
    connect_sqlite,
    handle_sqlite,
    probe_sqlite,
    prune_ledger_sqlite,
    write_transaction,
)
from effectusd.destination.sqlite_pool import SqlitePool, SqlitePoolTimeout

__all__ = [
    "DEFAULT_BUSY_TIMEOUT",
    "DEFAULT_CLOCK_SKEW",
    "DEFAULT_RETENTION",
    "AsyncMutation",
    "Database",
    "DatabaseURLError",
    "EffectusRequest",
    "FencingGrant",
    "PermanentFailure",
    "PostgresDatabase",
    "ProtocolError",
    "Reply",
    "RetryableFailure",
    "SchemaError",
    "SqliteDatabase",
    "SqliteMutation",
    "SqlitePool",
    "SqlitePoolTimeout",
    "SyncMutation",
    "connect_sqlite",
    "handle",
    "handle_sqlite",
    "handle_sync",
    "install",
    "install_sqlite",
    "install_sync",
    "parse_database_url",
    "parse_request",
    "probe",
    "probe_sqlite",
    "prune_ledger",
    "prune_ledger_sqlite",
    "prune_ledger_sync",
    "write_transaction",
]

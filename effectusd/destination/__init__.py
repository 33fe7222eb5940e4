"""The destination kit: honour effectusd's destination contract (DESIGN.md section 10) in a
Python service on PostgreSQL, atomically with the service's own business writes.

    from effectusd.destination import install, parse_request, handle, PermanentFailure

    await install(conn)                      # once, at startup: the kit's tables
    request = parse_request(headers, body)   # ProtocolError -> answer error.reply() (400)
    reply = await handle(conn, request, charge)

    async def charge(conn, request):
        if request.arguments["amount"] > LIMIT:
            raise PermanentFailure("declined", status=402)
        await conn.execute(INSERT_CHARGE, request.arguments)  # commits with the ledger row
        return {"charge_id": ...}

Starlette helpers live in ``effectusd.destination.asgi`` (extra ``destination``).
"""

from effectusd.destination.ledger import (
    DEFAULT_RETENTION,
    AsyncMutation,
    SyncMutation,
    handle,
    handle_sync,
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
from effectusd.destination.schema import SchemaError, install, install_sync

__all__ = [
    "DEFAULT_RETENTION",
    "AsyncMutation",
    "EffectusRequest",
    "FencingGrant",
    "PermanentFailure",
    "ProtocolError",
    "Reply",
    "RetryableFailure",
    "SchemaError",
    "SyncMutation",
    "handle",
    "handle_sync",
    "install",
    "install_sync",
    "parse_request",
    "prune_ledger",
    "prune_ledger_sync",
]

"""The example shop destination, built on the destination kit: exactly-once under retries.

Same endpoints and shapes as contrib/shop_destination.py (inventory, payments, shipping), but
every business row is written in one PostgreSQL transaction with the kit's ledger row, so a
retried, duplicated or concurrent request never reserves, charges or ships twice, and a stale
fencing token is refused before anything happens.

    python contrib/kit_shop_service.py --port 8765 --database-url postgresql://.../shop

The database must exist; the kit's tables and the shop's are created at startup.
"""

from __future__ import annotations

import argparse
import os
import uuid
from typing import Any

import psycopg
import uvicorn
from starlette.applications import Starlette

from effectusd.destination import EffectusRequest, PermanentFailure
from effectusd.destination.asgi import effectus_app

CHARGE_LIMIT = 10_000  # charges above this are declined: a permanent failure
Conn = psycopg.AsyncConnection[Any]

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS kit_shop_reservations (
        reservation_id   text PRIMARY KEY,
        order_id         text NOT NULL,
        sku              text NOT NULL,
        quantity         integer NOT NULL,
        idempotency_key  text NOT NULL,
        released_at      timestamptz
    )""",
    """CREATE TABLE IF NOT EXISTS kit_shop_charges (
        charge_id        text PRIMARY KEY,
        order_id         text NOT NULL,
        account_id       text NOT NULL,
        amount           bigint NOT NULL,
        currency         text NOT NULL,
        idempotency_key  text NOT NULL,
        refunded_at      timestamptz
    )""",
    """CREATE TABLE IF NOT EXISTS kit_shop_shipments (
        tracking         text PRIMARY KEY,
        order_id         text NOT NULL,
        reservation_id   text NOT NULL,
        idempotency_key  text NOT NULL
    )""",
)
BUSINESS_TABLES = ("kit_shop_reservations", "kit_shop_charges", "kit_shop_shipments")


async def create_tables(conn: Conn) -> None:
    for statement in SCHEMA:
        await conn.execute(statement)


def _field(request: EffectusRequest, name: str, kind: type) -> Any:
    """An argument of the right type, else a permanent refusal naming the field, not the value."""
    args = request.arguments
    value = args.get(name) if isinstance(args, dict) else None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise PermanentFailure(f"{name}: required {kind.__name__}")
    return value


def _new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


async def reserve(conn: Conn, request: EffectusRequest) -> dict[str, Any]:
    reservation_id = _new_id("res")
    quantity = _field(request, "quantity", int)
    if quantity < 1:
        raise PermanentFailure("quantity: must be at least 1")
    await conn.execute(
        "INSERT INTO kit_shop_reservations"
        " (reservation_id, order_id, sku, quantity, idempotency_key)"
        " VALUES (%s, %s, %s, %s, %s)",
        (
            reservation_id,
            _field(request, "order", str),
            _field(request, "sku", str),
            quantity,
            request.idempotency_key,
        ),
    )
    return {"reservation_id": reservation_id}


async def release(conn: Conn, request: EffectusRequest) -> dict[str, Any]:
    cur = await conn.execute(
        "UPDATE kit_shop_reservations SET released_at = coalesce(released_at, now())"
        " WHERE reservation_id = %s",
        (_field(request, "reservation_id", str),),
    )
    return {"released": cur.rowcount == 1}


async def charge(conn: Conn, request: EffectusRequest) -> dict[str, Any]:
    amount = _field(request, "amount", int)
    if amount > CHARGE_LIMIT:
        # 402 like shop_destination; stored and replayed, so a retry is declined again.
        raise PermanentFailure("declined", status=402)
    charge_id = _new_id("ch")
    await conn.execute(
        "INSERT INTO kit_shop_charges"
        " (charge_id, order_id, account_id, amount, currency, idempotency_key)"
        " VALUES (%s, %s, %s, %s, %s, %s)",
        (
            charge_id,
            _field(request, "order", str),
            _field(request, "account_id", str),
            amount,
            _field(request, "currency", str),
            request.idempotency_key,
        ),
    )
    return {"charge_id": charge_id}


async def refund(conn: Conn, request: EffectusRequest) -> dict[str, Any]:
    cur = await conn.execute(
        "UPDATE kit_shop_charges SET refunded_at = coalesce(refunded_at, now())"
        " WHERE charge_id = %s",
        (_field(request, "charge_id", str),),
    )
    return {"refunded": cur.rowcount == 1}


async def schedule_shipping(conn: Conn, request: EffectusRequest) -> dict[str, Any]:
    tracking = _new_id("trk")
    await conn.execute(
        "INSERT INTO kit_shop_shipments (tracking, order_id, reservation_id, idempotency_key)"
        " VALUES (%s, %s, %s, %s)",
        (
            tracking,
            _field(request, "order", str),
            _field(request, "reservation_id", str),
            request.idempotency_key,
        ),
    )
    return {"tracking": tracking}


ROUTES = {
    "/inventory/reserve": reserve,
    "/inventory/release": release,
    "/payments/charge": charge,
    "/payments/refund": refund,
    "/shipping/schedule": schedule_shipping,
}


def build_app(database_url: str, *, pool_max_size: int = 10) -> Starlette:
    """The shop as an ASGI app; serve it with uvicorn, in-process or not."""
    return effectus_app(database_url, ROUTES, setup=create_tables, max_size=pool_max_size)


def main() -> None:
    parser = argparse.ArgumentParser(description="example destination built on the kit")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("EFFECTUSD_DATABASE_URL"),
        help="the shop's own database (default: $EFFECTUSD_DATABASE_URL)",
    )
    args = parser.parse_args()
    if not args.database_url:
        parser.error("--database-url is required (or set EFFECTUSD_DATABASE_URL)")
    # One worker, no reload: the pool and the ledger need nothing more, and it stays killable.
    uvicorn.run(build_app(args.database_url), host=args.host, port=args.port, log_level="info")


if __name__ == "__main__":
    main()

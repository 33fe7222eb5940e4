"""The example shop destination, built on the destination kit: exactly-once under retries.

Same endpoints and shapes as contrib/shop_destination.py (inventory, payments, shipping), but
every business row is written in one transaction with the kit's ledger row, so a retried,
duplicated or concurrent request never reserves, charges or ships twice, and a stale fencing
token is refused before anything happens.

    python contrib/kit_shop_service.py --port 8765                  # SQLite: ./shop.db
    python contrib/kit_shop_service.py --database-url postgresql://.../shop

The shop's database is its own, not the dispatcher's: ``--database-url``, else
``$SHOP_DATABASE_URL``, else ``sqlite:///shop.db`` next to where it is run. A PostgreSQL
database must exist; the kit's tables and the shop's are created at startup.

Each endpoint is written once, as a function from the request to the one write it makes
(``Write``); ``postgres_mutation`` and ``sqlite_mutation`` run that write in either dialect.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
import uvicorn
from starlette.applications import Starlette

from effectusd.destination import (
    AsyncMutation,
    EffectusRequest,
    PermanentFailure,
    SqliteDatabase,
    SqliteMutation,
    parse_database_url,
)
from effectusd.destination.asgi import effectus_app

CHARGE_LIMIT = 10_000  # charges above this are declined: a permanent failure
DEFAULT_DATABASE_URL = "sqlite:///shop.db"
DATABASE_URL_ENV = "SHOP_DATABASE_URL"  # not EFFECTUSD_DATABASE_URL: that is the dispatcher's
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
# The same tables in SQLite; times are REAL Unix seconds, as in the kit's own SQLite tables.
SQLITE_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS kit_shop_reservations (
        reservation_id   TEXT PRIMARY KEY NOT NULL,
        order_id         TEXT NOT NULL,
        sku              TEXT NOT NULL,
        quantity         INTEGER NOT NULL,
        idempotency_key  TEXT NOT NULL,
        released_at      REAL
    ) STRICT""",
    """CREATE TABLE IF NOT EXISTS kit_shop_charges (
        charge_id        TEXT PRIMARY KEY NOT NULL,
        order_id         TEXT NOT NULL,
        account_id       TEXT NOT NULL,
        amount           INTEGER NOT NULL,
        currency         TEXT NOT NULL,
        idempotency_key  TEXT NOT NULL,
        refunded_at      REAL
    ) STRICT""",
    """CREATE TABLE IF NOT EXISTS kit_shop_shipments (
        tracking         TEXT PRIMARY KEY NOT NULL,
        order_id         TEXT NOT NULL,
        reservation_id   TEXT NOT NULL,
        idempotency_key  TEXT NOT NULL
    ) STRICT""",
)
BUSINESS_TABLES = ("kit_shop_reservations", "kit_shop_charges", "kit_shop_shipments")

_SQLITE_NOW = "(julianday('now') - 2440587.5) * 86400.0"
POSTGRES_STATEMENTS = {
    "reserve": "INSERT INTO kit_shop_reservations"
    " (reservation_id, order_id, sku, quantity, idempotency_key)"
    " VALUES (%(reservation_id)s, %(order)s, %(sku)s, %(quantity)s, %(key)s)",
    "release": "UPDATE kit_shop_reservations SET released_at = coalesce(released_at, now())"
    " WHERE reservation_id = %(reservation_id)s",
    "charge": "INSERT INTO kit_shop_charges"
    " (charge_id, order_id, account_id, amount, currency, idempotency_key)"
    " VALUES (%(charge_id)s, %(order)s, %(account_id)s, %(amount)s, %(currency)s, %(key)s)",
    "refund": "UPDATE kit_shop_charges SET refunded_at = coalesce(refunded_at, now())"
    " WHERE charge_id = %(charge_id)s",
    "ship": "INSERT INTO kit_shop_shipments (tracking, order_id, reservation_id, idempotency_key)"
    " VALUES (%(tracking)s, %(order)s, %(reservation_id)s, %(key)s)",
}
SQLITE_STATEMENTS = {
    "reserve": "INSERT INTO kit_shop_reservations"
    " (reservation_id, order_id, sku, quantity, idempotency_key)"
    " VALUES (:reservation_id, :order, :sku, :quantity, :key)",
    "release": "UPDATE kit_shop_reservations"
    f" SET released_at = coalesce(released_at, {_SQLITE_NOW})"
    " WHERE reservation_id = :reservation_id",
    "charge": "INSERT INTO kit_shop_charges"
    " (charge_id, order_id, account_id, amount, currency, idempotency_key)"
    " VALUES (:charge_id, :order, :account_id, :amount, :currency, :key)",
    "refund": f"UPDATE kit_shop_charges SET refunded_at = coalesce(refunded_at, {_SQLITE_NOW})"
    " WHERE charge_id = :charge_id",
    "ship": "INSERT INTO kit_shop_shipments (tracking, order_id, reservation_id, idempotency_key)"
    " VALUES (:tracking, :order, :reservation_id, :key)",
}


async def create_tables(conn: Conn) -> None:
    for statement in SCHEMA:
        await conn.execute(statement)


def create_sqlite_tables(conn: sqlite3.Connection) -> None:
    for statement in SQLITE_SCHEMA:
        conn.execute(statement)


@dataclass(frozen=True, slots=True)
class Write:
    """One endpoint's business write: a statement of POSTGRES_/SQLITE_STATEMENTS, its
    parameters, and the answer to give once it changed ``rowcount`` rows."""

    statement: str
    params: dict[str, Any]
    answer: Callable[[int], dict[str, Any]]


Action = Callable[[EffectusRequest], Write]


def _field(request: EffectusRequest, name: str, kind: type) -> Any:
    """An argument of the right type, else a permanent refusal naming the field, not the value."""
    args = request.arguments
    value = args.get(name) if isinstance(args, dict) else None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise PermanentFailure(f"{name}: required {kind.__name__}")
    return value


def _new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def reserve(request: EffectusRequest) -> Write:
    reservation_id = _new_id("res")
    quantity = _field(request, "quantity", int)
    if quantity < 1:
        raise PermanentFailure("quantity: must be at least 1")
    params = {
        "reservation_id": reservation_id,
        "order": _field(request, "order", str),
        "sku": _field(request, "sku", str),
        "quantity": quantity,
        "key": request.idempotency_key,
    }
    return Write("reserve", params, lambda _: {"reservation_id": reservation_id})


def release(request: EffectusRequest) -> Write:
    params = {"reservation_id": _field(request, "reservation_id", str)}
    return Write("release", params, lambda rows: {"released": rows == 1})


def charge(request: EffectusRequest) -> Write:
    amount = _field(request, "amount", int)
    if amount > CHARGE_LIMIT:
        # 402 like shop_destination; stored and replayed, so a retry is declined again.
        raise PermanentFailure("declined", status=402)
    charge_id = _new_id("ch")
    params = {
        "charge_id": charge_id,
        "order": _field(request, "order", str),
        "account_id": _field(request, "account_id", str),
        "amount": amount,
        "currency": _field(request, "currency", str),
        "key": request.idempotency_key,
    }
    return Write("charge", params, lambda _: {"charge_id": charge_id})


def refund(request: EffectusRequest) -> Write:
    params = {"charge_id": _field(request, "charge_id", str)}
    return Write("refund", params, lambda rows: {"refunded": rows == 1})


def schedule_shipping(request: EffectusRequest) -> Write:
    tracking = _new_id("trk")
    params = {
        "tracking": tracking,
        "order": _field(request, "order", str),
        "reservation_id": _field(request, "reservation_id", str),
        "key": request.idempotency_key,
    }
    return Write("ship", params, lambda _: {"tracking": tracking})


ACTIONS: dict[str, Action] = {
    "/inventory/reserve": reserve,
    "/inventory/release": release,
    "/payments/charge": charge,
    "/payments/refund": refund,
    "/shipping/schedule": schedule_shipping,
}


def postgres_mutation(action: Action) -> AsyncMutation:
    async def mutation(conn: Conn, request: EffectusRequest) -> dict[str, Any]:
        write = action(request)
        cur = await conn.execute(POSTGRES_STATEMENTS[write.statement], write.params)
        return write.answer(cur.rowcount)

    return mutation


def sqlite_mutation(action: Action) -> SqliteMutation:
    def mutation(conn: sqlite3.Connection, request: EffectusRequest) -> dict[str, Any]:
        write = action(request)
        cur = conn.execute(SQLITE_STATEMENTS[write.statement], write.params)
        return write.answer(cur.rowcount)

    return mutation


ROUTES = {path: postgres_mutation(action) for path, action in ACTIONS.items()}
SQLITE_ROUTES = {path: sqlite_mutation(action) for path, action in ACTIONS.items()}


def build_app(database_url: str = DEFAULT_DATABASE_URL, *, pool_max_size: int = 10) -> Starlette:
    """The shop as an ASGI app on either database; serve it with uvicorn, in-process or not."""
    if isinstance(parse_database_url(database_url), SqliteDatabase):
        return effectus_app(
            database_url, SQLITE_ROUTES, setup=create_sqlite_tables, max_size=pool_max_size
        )
    return effectus_app(database_url, ROUTES, setup=create_tables, max_size=pool_max_size)


def main() -> None:
    parser = argparse.ArgumentParser(description="example destination built on the kit")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    parser.add_argument(
        "--database-url",
        default=os.environ.get(DATABASE_URL_ENV) or DEFAULT_DATABASE_URL,
        help=(
            "the shop's own database: sqlite:///relative.db, sqlite:////absolute.db or "
            f"postgresql://... (default: ${DATABASE_URL_ENV}, else {DEFAULT_DATABASE_URL})"
        ),
    )
    args = parser.parse_args()
    try:
        app = build_app(args.database_url)
    except ValueError as exc:  # DatabaseURLError names what is wrong, never the URL itself
        parser.error(f"--database-url: {exc}")
    # One worker, no reload: the pool and the ledger need nothing more, and it stays killable.
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")


if __name__ == "__main__":
    main()

"""The warehouse: reserves stock, releases a reservation (the compensation), schedules the
shipping. Built on the destination kit: each write commits with the kit's ledger row, so a
retried request (the same Idempotency-Key) gets the stored answer and changes nothing again.

    python -m examples.shop_app.warehouse --port 8781 --database-url sqlite:///warehouse.db
"""

from __future__ import annotations

import sqlite3
import uuid
from typing import Any

from effectusd.destination import EffectusRequest, PermanentFailure
from examples.shop_app.service import argument, serve

TABLES = (
    """CREATE TABLE IF NOT EXISTS reservations (
        reservation_id TEXT PRIMARY KEY, order_id TEXT NOT NULL, sku TEXT NOT NULL,
        released INTEGER NOT NULL DEFAULT 0) STRICT""",
    """CREATE TABLE IF NOT EXISTS shipments (
        tracking TEXT PRIMARY KEY, order_id TEXT NOT NULL, reservation_id TEXT NOT NULL) STRICT""",
)


def create_tables(conn: sqlite3.Connection) -> None:
    for statement in TABLES:
        conn.execute(statement)


def reserve(conn: sqlite3.Connection, request: EffectusRequest) -> dict[str, Any]:
    if argument(request, "quantity", int) != 1:
        raise PermanentFailure("quantity: this warehouse reserves one item at a time")
    reservation_id = f"res-{uuid.uuid4().hex[:12]}"
    conn.execute(
        "INSERT INTO reservations (reservation_id, order_id, sku) VALUES (?, ?, ?)",
        (reservation_id, argument(request, "order", str), argument(request, "sku", str)),
    )
    return {"reservation_id": reservation_id}


def release(conn: sqlite3.Connection, request: EffectusRequest) -> dict[str, Any]:
    cursor = conn.execute(
        "UPDATE reservations SET released = 1 WHERE reservation_id = ?",
        (argument(request, "reservation_id", str),),
    )
    return {"released": cursor.rowcount == 1}


def schedule(conn: sqlite3.Connection, request: EffectusRequest) -> dict[str, Any]:
    tracking = f"trk-{uuid.uuid4().hex[:12]}"
    conn.execute(
        "INSERT INTO shipments (tracking, order_id, reservation_id) VALUES (?, ?, ?)",
        (tracking, argument(request, "order", str), argument(request, "reservation_id", str)),
    )
    return {"tracking": tracking}


ROUTES = {
    "/inventory/reserve": reserve,
    "/inventory/release": release,
    "/shipping/schedule": schedule,
}

if __name__ == "__main__":
    serve("warehouse", 8781, ROUTES, create_tables)

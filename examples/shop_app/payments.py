"""Payments: charges an account (declines more than LIMIT: a permanent failure, so the saga
compensates) and refunds a charge (the compensation). Built on the destination kit; the
fencing tokens the dispatcher takes for ``account:…`` are checked by the kit before the write.

    python -m examples.shop_app.payments --port 8782 --database-url sqlite:///payments.db
"""

from __future__ import annotations

import sqlite3
import uuid
from typing import Any

from effectusd.destination import EffectusRequest, PermanentFailure
from examples.shop_app.service import argument, serve

LIMIT = 10_000

TABLES = (
    """CREATE TABLE IF NOT EXISTS charges (
        charge_id TEXT PRIMARY KEY, order_id TEXT NOT NULL, account_id TEXT NOT NULL,
        amount INTEGER NOT NULL, currency TEXT NOT NULL,
        refunded INTEGER NOT NULL DEFAULT 0) STRICT""",
)


def create_tables(conn: sqlite3.Connection) -> None:
    for statement in TABLES:
        conn.execute(statement)


def charge(conn: sqlite3.Connection, request: EffectusRequest) -> dict[str, Any]:
    amount = argument(request, "amount", int)
    if amount > LIMIT:
        raise PermanentFailure("declined", status=402)  # stored: a retry is declined again
    charge_id = f"ch-{uuid.uuid4().hex[:12]}"
    conn.execute(
        "INSERT INTO charges (charge_id, order_id, account_id, amount, currency)"
        " VALUES (?, ?, ?, ?, ?)",
        (
            charge_id,
            argument(request, "order", str),
            argument(request, "account_id", str),
            amount,
            argument(request, "currency", str),
        ),
    )
    return {"charge_id": charge_id}


def refund(conn: sqlite3.Connection, request: EffectusRequest) -> dict[str, Any]:
    cursor = conn.execute(
        "UPDATE charges SET refunded = 1 WHERE charge_id = ?",
        (argument(request, "charge_id", str),),
    )
    return {"refunded": cursor.rowcount == 1}


ROUTES = {"/payments/charge": charge, "/payments/refund": refund}

if __name__ == "__main__":
    serve("payments", 8782, ROUTES, create_tables)

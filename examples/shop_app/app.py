"""The shop: a Starlette service whose database is also effectusd's store.

``POST /orders`` writes the order, submits its checkout saga and takes the book from stock in
ONE transaction: if any of it fails (out of stock), none of it happened — no order, no saga,
nothing for the daemon to send. ``GET /orders/{id}`` returns the order and its saga's typed
view (``?wait=SECONDS``: once the saga is settled, woken by the store's notification).

    python -m examples.shop_app.app --config examples/shop_app/effectusd.toml \\
        --database-url postgresql://postgres@127.0.0.1:5432/shop --port 8780

On PostgreSQL the shop writes through a psycopg AsyncConnectionPool that the AsyncClient
shares; on SQLite through a sqlite3 connection in a worker thread with the sync Client.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Protocol

import psycopg
import uvicorn
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel, Field, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from effectusd import AsyncClient, Client, SagaView, WaitTimeout
from effectusd.config import Config, load_config
from effectusd.core.database_url import SqliteDatabase, parse_database_url
from examples.shop_app.plan import CHECKOUT

TABLES = (
    "CREATE TABLE IF NOT EXISTS shop_orders (order_id TEXT PRIMARY KEY, account_id TEXT NOT NULL,"
    " amount INTEGER NOT NULL, currency TEXT NOT NULL, sku TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS shop_stock (sku TEXT PRIMARY KEY,"
    " quantity INTEGER NOT NULL CHECK (quantity >= 0))",
)
INSERT_ORDER = (
    "INSERT INTO shop_orders (order_id, account_id, amount, currency, sku)"
    " VALUES (%(order_id)s, %(account_id)s, %(amount)s, %(currency)s, %(sku)s)"
)
TAKE_ONE = "UPDATE shop_stock SET quantity = quantity - 1 WHERE sku = %(sku)s"
SET_STOCK = (
    "INSERT INTO shop_stock (sku, quantity) VALUES (%(sku)s, %(quantity)s)"
    " ON CONFLICT (sku) DO UPDATE SET quantity = excluded.quantity"
)
SELECT_ORDER = "SELECT order_id, account_id, amount, currency, sku FROM shop_orders" + (
    " WHERE order_id = %(order_id)s"
)
BOOK = "book-42"


def sqlite_form(statement: str) -> str:
    """The same statement with sqlite3's named parameters."""
    return statement.replace("%(", ":").replace(")s", "")


class OrderIn(BaseModel):
    account_id: str = Field(min_length=1)
    amount: int = Field(gt=0)
    currency: str = "EUR"
    sku: str = BOOK


class OutOfStock(Exception):
    """The stock check failed: the whole transaction (order and saga) was rolled back."""


class Orders(Protocol):
    client: AsyncClient

    async def open(self, stock: int) -> None: ...
    async def close(self) -> None: ...
    async def place(self, row: dict[str, Any]) -> str: ...
    async def find(self, order_id: str) -> dict[str, Any] | None: ...


class PostgresOrders:
    def __init__(self, config: Config, url: str) -> None:
        self.pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] = AsyncConnectionPool(
            url, min_size=1, max_size=8, open=False
        )
        self.client = AsyncClient(config, pool=self.pool)  # get/wait borrow from the pool

    async def open(self, stock: int) -> None:
        await self.pool.open(wait=True)
        async with self.pool.connection() as conn:
            for statement in TABLES:
                await conn.execute(statement)
            await conn.execute(SET_STOCK, {"sku": BOOK, "quantity": stock})

    async def close(self) -> None:
        await self.pool.close()

    async def place(self, row: dict[str, Any]) -> str:
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(INSERT_ORDER, row)
            submitted = await self.client.submit(
                CHECKOUT, execution_id=row["order_id"], facts=facts(row), conn=conn
            )
            try:
                await conn.execute(TAKE_ONE, row)
            except psycopg.errors.CheckViolation as exc:
                raise OutOfStock(row["sku"]) from exc  # leaving the block rolls it all back
        return submitted.saga_id

    async def find(self, order_id: str) -> dict[str, Any] | None:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(SELECT_ORDER, {"order_id": order_id})
            found = await cursor.fetchone()
        return None if found is None else dict(zip(ORDER_FIELDS, found, strict=True))


class SqliteOrders:
    def __init__(self, config: Config, url: str, path: str) -> None:
        self.path = path
        self.sync_client = Client(config, database_url=url)
        self.client = AsyncClient(config, database_url=url)  # reads in worker threads

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30, isolation_level=None)

    async def open(self, stock: int) -> None:
        def create() -> None:
            with self._connect() as conn:
                for statement in TABLES:
                    conn.execute(statement)
                conn.execute(sqlite_form(SET_STOCK), {"sku": BOOK, "quantity": stock})

        await asyncio.to_thread(create)

    async def close(self) -> None:
        return None

    def _place(self, row: dict[str, Any]) -> str:
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")  # one writer from here on: no lock upgrade later
            conn.execute(sqlite_form(INSERT_ORDER), row)
            submitted = self.sync_client.submit(
                CHECKOUT, execution_id=row["order_id"], facts=facts(row), conn=conn
            )
            try:
                conn.execute(sqlite_form(TAKE_ONE), row)
            except sqlite3.IntegrityError as exc:
                conn.execute("ROLLBACK")
                raise OutOfStock(row["sku"]) from exc
            conn.execute("COMMIT")
            return submitted.saga_id
        finally:
            conn.close()  # closing with the transaction open rolls it back

    async def place(self, row: dict[str, Any]) -> str:
        return await asyncio.to_thread(self._place, row)

    async def find(self, order_id: str) -> dict[str, Any] | None:
        def read() -> dict[str, Any] | None:
            with self._connect() as conn:
                found = conn.execute(sqlite_form(SELECT_ORDER), {"order_id": order_id}).fetchone()
            return None if found is None else dict(zip(ORDER_FIELDS, found, strict=True))

        return await asyncio.to_thread(read)


ORDER_FIELDS = ("order_id", "account_id", "amount", "currency", "sku")


def facts(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "order": row["order_id"],
        "sku": row["sku"],
        "account_id": row["account_id"],
        "amount": row["amount"],
        "currency": row["currency"],
    }


def orders_for(config: Config, url: str) -> Orders:
    database = parse_database_url(url)
    if isinstance(database, SqliteDatabase):
        return SqliteOrders(config, url, str(database.path))
    return PostgresOrders(config, url)


def saga_json(view: SagaView | None) -> dict[str, Any] | None:
    return None if view is None else view.model_dump(mode="json")


def build_app(config: Config, url: str, stock: int = 100) -> Starlette:
    orders = orders_for(config, url)

    async def place(request: Request) -> JSONResponse:
        try:
            order = OrderIn.model_validate_json(await request.body())
        except ValidationError as exc:
            return JSONResponse({"error": exc.errors(include_input=False)}, status_code=422)
        row = {"order_id": f"order-{uuid.uuid4().hex[:12]}", **order.model_dump()}
        try:
            saga_id = await orders.place(row)
        except OutOfStock:
            return JSONResponse({"error": f"{order.sku} is out of stock"}, status_code=409)
        return JSONResponse({"order_id": row["order_id"], "saga_id": saga_id}, status_code=201)

    async def show(request: Request) -> JSONResponse:
        order_id = request.path_params["order_id"]
        order = await orders.find(order_id)
        if order is None:
            return JSONResponse({"error": "no such order"}, status_code=404)
        wait = float(request.query_params.get("wait", "0"))
        try:
            view = await _saga_of(orders.client, order_id, wait)
        except WaitTimeout as late:  # not settled yet: say where it is
            return JSONResponse({"order": order, "saga": saga_json(late.view)}, status_code=202)
        return JSONResponse({"order": order, "saga": saga_json(view)})

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await orders.open(stock)
        try:
            yield
        finally:
            await orders.close()

    routes = [Route("/orders", place, methods=["POST"]), Route("/orders/{order_id}", show)]
    return Starlette(routes=routes, lifespan=lifespan)


async def _saga_of(client: AsyncClient, order_id: str, wait: float) -> SagaView | None:
    """The order's saga (the order id is its execution id); with ``wait``, once it is terminal
    or blocked, or WaitTimeout after ``wait`` seconds."""
    view = await client.get(execution_id=order_id, plan_id=CHECKOUT.plan_id)
    if view is None or wait <= 0:
        return view
    return await client.wait(view.saga_id, wait)


def main() -> None:
    parser = argparse.ArgumentParser(description="the example shop application")
    parser.add_argument("--config", default="examples/shop_app/effectusd.toml")
    parser.add_argument("--database-url", help="default: the config's [database] url")
    parser.add_argument("--port", type=int, default=8780, help="0 picks a free port")
    parser.add_argument("--stock", type=int, default=100, help="books in stock at startup")
    args = parser.parse_args()
    config = load_config(args.config)
    app = build_app(config, args.database_url or config.database.url, args.stock)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="info")


if __name__ == "__main__":
    main()

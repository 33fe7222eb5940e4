"""`make demo`: the example shop (built on the destination kit), the daemon and two sagas,
then what the shop committed and both sagas' timelines.

Needs nothing but Python: effectusd and the shop each keep a SQLite file in `.demo/`.
Set EFFECTUSD_DATABASE_URL (and SHOP_DATABASE_URL for the shop) to a postgresql:// URL to
run the same demo on PostgreSQL instead.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from effectusd.cli import render  # noqa: E402
from effectusd.client import Client  # noqa: E402
from effectusd.config import load_config  # noqa: E402
from effectusd.core.canonical import parse_json  # noqa: E402
from effectusd.core.database_url import SqliteDatabase, parse_database_url  # noqa: E402
from effectusd.dispatcher.daemon import Daemon  # noqa: E402
from effectusd.store.sql import store_backend  # noqa: E402

WORKDIR = ROOT / ".demo"
DATABASE_URL = os.environ.get("EFFECTUSD_DATABASE_URL", "sqlite:///.demo/effectusd.db")
SHOP_DATABASE_URL = os.environ.get("SHOP_DATABASE_URL", "sqlite:///.demo/shop.db")
SHOP_PORT = 8765  # examples/effectusd.toml points its destinations here


def start_shop(url: str) -> subprocess.Popen[bytes]:
    shop = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "contrib" / "kit_shop_service.py"),
            "--port",
            str(SHOP_PORT),
            "--database-url",
            url,
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", SHOP_PORT), timeout=0.2).close()
            return shop
        except OSError:
            if shop.poll() is not None:
                raise SystemExit(f"the shop did not start (is port {SHOP_PORT} free?)") from None
            time.sleep(0.1)
    shop.kill()
    raise SystemExit("the shop did not start within 20 s")


def shop_rows(url: str, query: str) -> list[Any]:
    database = parse_database_url(url)
    if isinstance(database, SqliteDatabase):
        conn = sqlite3.connect(ROOT / database.path)
        try:
            return conn.execute(query).fetchall()
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(url) as pg:
        return pg.execute(query).fetchall()


def shop_log(url: str) -> list[str]:
    lines = [
        f"reserved {q} x {sku} for {order}" + (" (released)" if released else "")
        for order, sku, q, released in shop_rows(
            url, "SELECT order_id, sku, quantity, released_at FROM kit_shop_reservations"
        )
    ]
    lines += [
        f"charged {amount} {currency} to {account} for {order}"
        + (" (refunded)" if refunded else "")
        for amount, currency, account, order, refunded in shop_rows(
            url,
            "SELECT amount, currency, account_id, order_id, refunded_at FROM kit_shop_charges",
        )
    ]
    lines += [
        f"shipping scheduled for {order}"
        for (order,) in shop_rows(url, "SELECT order_id FROM kit_shop_shipments")
    ]
    return lines


def main() -> None:
    os.chdir(ROOT)  # the SQLite URLs are relative to the repository
    WORKDIR.mkdir(exist_ok=True)
    url, shop_url = DATABASE_URL, SHOP_DATABASE_URL
    backend = store_backend(url)
    with backend.runner.connect(create=True) as conn:
        backend.migrator.migrate(conn)
    print(f"▶ effectusd's store: {url}")
    shop = start_shop(shop_url)
    print(f"▶ the example shop (effectusd.destination) on http://127.0.0.1:{SHOP_PORT}")
    try:
        config = load_config(ROOT / "examples" / "effectusd.toml")
        client = Client(config, database_url=url)
        plan = parse_json((ROOT / "examples" / "checkout.json").read_text())
        run = uuid.uuid4().hex[:6]
        happy = client.submit(
            plan,
            execution_id=f"order-{run}-1",
            facts={"order": f"o-{run}-1", "account_id": "acc-1", "amount": 1250, "currency": "EUR"},
        )
        declined = client.submit(
            plan,
            execution_id=f"order-{run}-2",
            facts={
                "order": f"o-{run}-2",
                "account_id": "acc-2",
                "amount": 99_000,
                "currency": "EUR",
            },
        )
        print(f"▶ submitted sagas {happy.saga_id[:12]}… and {declined.saga_id[:12]}…")
        print("▶ running the daemon until there is nothing left to do")
        asyncio.run(Daemon(config, url).run(until_idle=True))
        print("\n▶ what the shop committed (its own tables, written with the kit's ledger):")
        for line in shop_log(shop_url):
            if run in line:
                print(f"    {line}")
    finally:
        shop.terminate()
        shop.wait(10)
    for title, saga in (("completes", happy), ("is declined and compensated", declined)):
        view = client.get(saga.saga_id)
        assert view is not None
        print(f"\n▶ the saga that {title}:\n")
        print(render.saga_detail(view))
    print(
        "\nInspect again with:\n  .venv/bin/effectusd --config examples/effectusd.toml "
        f"--database-url '{url}' sagas show {happy.saga_id}"
    )


if __name__ == "__main__":
    main()

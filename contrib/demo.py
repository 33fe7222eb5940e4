"""`make demo`: the example shop (built on the destination kit), the daemon and two sagas,
then what the shop committed and both sagas' timelines.

Uses the database server of EFFECTUSD_DATABASE_URL (default: local PostgreSQL): database
`effectusd_demo` for effectusd and `effectusd_demo_shop` for the shop, created if needed.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from effectusd import render  # noqa: E402
from effectusd.client import Client  # noqa: E402
from effectusd.config import load_config  # noqa: E402
from effectusd.core.canonical import parse_json  # noqa: E402
from effectusd.dispatcher.daemon import Daemon  # noqa: E402
from effectusd.store.postgres.migrations import migrate  # noqa: E402

SERVER_URL = os.environ.get(
    "EFFECTUSD_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
SHOP_PORT = 8765  # examples/effectusd.toml points its destinations here


def database(name: str) -> str:
    admin = psycopg.conninfo.make_conninfo(SERVER_URL, dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
    return psycopg.conninfo.make_conninfo(SERVER_URL, dbname=name)


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


def shop_log(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        lines = [
            f"reserved {q} x {sku} for {order}" + (" (released)" if released else "")
            for order, sku, q, released in conn.execute(
                "SELECT order_id, sku, quantity, released_at FROM kit_shop_reservations"
            )
        ]
        lines += [
            f"charged {amount} {currency} to {account} for {order}"
            + (" (refunded)" if refunded else "")
            for amount, currency, account, order, refunded in conn.execute(
                "SELECT amount, currency, account_id, order_id, refunded_at FROM kit_shop_charges"
            )
        ]
        lines += [
            f"shipping scheduled for {order}"
            for (order,) in conn.execute("SELECT order_id FROM kit_shop_shipments")
        ]
    return lines


def main() -> None:
    url = database("effectusd_demo")
    with psycopg.connect(url, autocommit=True) as conn:
        migrate(conn)
    shop_url = database("effectusd_demo_shop")
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

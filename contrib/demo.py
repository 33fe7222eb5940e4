"""`make demo`: a destination, the daemon and two sagas, then their timelines.

Uses the database server of EFFECTUSD_DATABASE_URL (default: local PostgreSQL) and its own
database `effectusd_demo`, created and migrated if needed.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import uuid
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from contrib.shop_destination import Shop, make_server  # noqa: E402
from effectusd import render  # noqa: E402
from effectusd.client import Client  # noqa: E402
from effectusd.config import load_config  # noqa: E402
from effectusd.core.canonical import parse_json  # noqa: E402
from effectusd.dispatcher.daemon import Daemon  # noqa: E402
from effectusd.store.postgres.migrations import migrate  # noqa: E402

SERVER_URL = os.environ.get(
    "EFFECTUSD_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)


def demo_database() -> str:
    url = psycopg.conninfo.make_conninfo(SERVER_URL, dbname="effectusd_demo")
    admin = psycopg.conninfo.make_conninfo(SERVER_URL, dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = 'effectusd_demo'"
        ).fetchone()
        if not exists:
            conn.execute("CREATE DATABASE effectusd_demo")
    with psycopg.connect(url, autocommit=True) as conn:
        migrate(conn)
    return url


def main() -> None:
    url = demo_database()
    config = load_config(ROOT / "examples" / "effectusd.toml")
    shop = Shop()
    server = make_server(8765, shop)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print("▶ shop destination on http://127.0.0.1:8765")

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
        facts={"order": f"o-{run}-2", "account_id": "acc-2", "amount": 99_000, "currency": "EUR"},
    )
    print(f"▶ submitted sagas {happy.saga_id[:12]}… and {declined.saga_id[:12]}…")
    print("▶ running the daemon until there is nothing left to do")
    asyncio.run(Daemon(config, url).run(until_idle=True))
    server.shutdown()

    print("\n▶ what the destination did:")
    for line in shop.log:
        print(f"    {line}")
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

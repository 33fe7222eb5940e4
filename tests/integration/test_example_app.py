"""The example application (examples/shop_app) end to end over HTTP, on both stores: the shop,
its two kit-based destination services and the real daemon, each its own process.

One order completes (reserve → charge → ship), one is declined at ``charge`` and compensated
(its reservation released), and one fails its stock check after the submit: that transaction
rolls back and leaves neither the order nor its saga.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx

from effectusd import Client, SagaState, SagaView
from effectusd.config import load_config
from tests.support import backends
from tests.support.harness import fetch, spawn_daemon
from tests.support.services import serving

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "shop_app"
WAIT_S = 30
STOCK = 2  # two orders get a book; the third fails its stock check


def module(name: str, *args: str) -> list[str]:
    return [sys.executable, "-m", f"examples.shop_app.{name}", "--port", "0", *args]


@contextmanager
def shop_running(tmp_path: Path, store_url: str) -> Iterator[str]:
    """The destinations, the daemon (on a copy of the example config pointing at them) and the
    shop; yields the shop's base URL."""
    with ExitStack() as stack:
        warehouse = stack.enter_context(
            serving(module("warehouse", "--database-url", f"sqlite:///{tmp_path}/w.db"), cwd=ROOT)
        )
        payments = stack.enter_context(
            serving(module("payments", "--database-url", f"sqlite:///{tmp_path}/p.db"), cwd=ROOT)
        )
        config = (EXAMPLE / "effectusd.toml").read_text()
        config = config.replace("http://127.0.0.1:8781", warehouse)
        config = config.replace("http://127.0.0.1:8782", payments)
        config_file = tmp_path / "effectusd.toml"
        config_file.write_text(config)
        daemon = spawn_daemon(config_file, store_url)
        stack.callback(daemon.wait, 30)
        stack.callback(daemon.terminate)
        shop_args = ["--config", str(config_file), "--database-url", store_url]
        yield stack.enter_context(
            serving(module("app", *shop_args, "--stock", str(STOCK)), cwd=ROOT)
        )


def shop_rows(store_url: str, query: str) -> list[dict[str, Any]]:
    if not backends.is_sqlite(store_url):
        return fetch(store_url, query)
    with sqlite3.connect(backends.sqlite_path(store_url)) as conn:
        conn.row_factory = sqlite3.Row
        return [dict(row) for row in conn.execute(query)]


def settled(http: httpx.Client, order_id: str) -> SagaView:
    answer = http.get(f"/orders/{order_id}", params={"wait": WAIT_S})
    assert answer.status_code == 200, answer.text
    return SagaView.model_validate(answer.json()["saga"])


def test_orders_complete_compensate_or_roll_back_with_their_saga(
    store_url: str, tmp_path: Path
) -> None:
    with shop_running(tmp_path, store_url) as shop, httpx.Client(base_url=shop, timeout=60) as http:
        paid = http.post("/orders", json={"account_id": "acc-1", "amount": 1250})
        declined = http.post("/orders", json={"account_id": "acc-2", "amount": 99_000})
        assert (paid.status_code, declined.status_code) == (201, 201), declined.text
        sold_out = http.post("/orders", json={"account_id": "acc-3", "amount": 10})
        assert sold_out.status_code == 409 and "out of stock" in sold_out.text

        done = settled(http, paid.json()["order_id"])
        undone = settled(http, declined.json()["order_id"])
        assert http.post("/orders", content=b'{"amount": -1}').status_code == 422
        assert http.get("/orders/order-none").status_code == 404

    assert done.saga_id == paid.json()["saga_id"] and done.state is SagaState.COMPLETED
    assert done.step("ship").result is not None and "tracking" in done.step("ship").result
    assert undone.state is SagaState.COMPENSATED and "charge" in (undone.stop_reason or "")
    release = [d for d in undone.step("reserve").dispatches if d.direction == "compensation"]
    assert [d.state for d in release] == ["succeeded"]  # the reservation was released
    # the rolled back order left nothing: no order row, no saga, nothing queued to send
    orders = shop_rows(store_url, "SELECT order_id FROM shop_orders ORDER BY order_id")
    assert sorted(row["order_id"] for row in orders) == sorted(
        [paid.json()["order_id"], declined.json()["order_id"]]
    )
    client = Client(load_config(EXAMPLE / "effectusd.toml"), database_url=store_url)
    assert {row.saga_id for row in client.list()} == {done.saga_id, undone.saga_id}
    assert shop_rows(store_url, "SELECT quantity FROM shop_stock") == [{"quantity": 0}]

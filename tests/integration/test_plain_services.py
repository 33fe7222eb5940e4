"""Ordinary HTTP services, written as people write them (aiohttp, no destination kit, no
X-Effectus-Outcome, no replay by key), behind the real daemon with ``answers = "http"``, on
both stores (issue 45).

A shop's three services: stock (reserve, release), payments (charge, refund: 402 for a
declined card, 422 for an amount it refuses, 429 while busy) and shipping (ship, behind a
bearer token: 401 for a wrong one; one order's shipment is committed and then answered 500, as
a gateway might; GET /shipments/{order} looks one up). A refusal compensates at once, the
earlier step's compensation reaching its service; a 429 is sent again; a 401 waits, never
compensates, and completes once the credential is fixed and the daemon restarted, or, once its
budget is spent, blocks (blocked_destination) until a person retries or cancels; the 500 after
the commit blocks (blocked_unknown) and the probe settles it. No effect happens twice and no
order is undone.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from click.testing import CliRunner

from effectusd.cli import main
from effectusd.client import AsyncClient
from effectusd.config import load_config
from effectusd.core.views import SagaView
from tests.support.harness import daemon_running

TOKEN_ENV = "PLAIN_SHIPPING_TOKEN"
GOOD_TOKEN = "shipping-token-current"
WAIT_S = 30


@dataclass
class Shop:
    """What the three services committed, by order: each list grows once per effect."""

    token: str = GOOD_TOKEN
    reservations: list[str] = field(default_factory=list)
    releases: list[str] = field(default_factory=list)
    charges: list[str] = field(default_factory=list)
    refunds: list[str] = field(default_factory=list)
    shipments: list[str] = field(default_factory=list)
    refused_auth: Counter[str] = field(default_factory=Counter)
    fail_after_commit: set[str] = field(default_factory=set)  # ship: commit, then answer 500
    busy: Counter[str] = field(default_factory=Counter)  # charge: answer 429 this many times
    lookups: int = 0

    def effects(self, order: str) -> dict[str, int]:
        kinds = ("reservations", "releases", "charges", "refunds", "shipments")
        return {kind: getattr(self, kind).count(order) for kind in kinds}


def stock_app(shop: Shop) -> web.Application:
    async def reserve(request: web.Request) -> web.Response:
        shop.reservations.append((await request.json())["order"])
        return web.json_response({"reserved": True})

    async def release(request: web.Request) -> web.Response:
        shop.releases.append((await request.json())["order"])
        return web.json_response({"released": True})

    app = web.Application()
    app.router.add_post("/reservations", reserve)
    app.router.add_post("/releases", release)
    return app


def payments_app(shop: Shop) -> web.Application:
    async def charge(request: web.Request) -> web.Response:
        body = await request.json()
        if shop.busy[body["order"]] > 0:
            shop.busy[body["order"]] -= 1
            return web.json_response(
                {"error": "slow down"}, status=429, headers={"Retry-After": "0"}
            )
        if body["amount"] <= 0:
            return web.json_response({"error": "amount must be positive"}, status=422)
        if body["amount"] > 1000:
            return web.json_response({"error": "card declined"}, status=402)
        shop.charges.append(body["order"])
        return web.json_response({"charge_id": f"ch-{body['order']}"})

    async def refund(request: web.Request) -> web.Response:
        shop.refunds.append((await request.json())["order"])
        return web.json_response({"refunded": True})

    app = web.Application()
    app.router.add_post("/charges", charge)
    app.router.add_post("/refunds", refund)
    return app


def shipping_app(shop: Shop) -> web.Application:
    async def ship(request: web.Request) -> web.Response:
        order = (await request.json())["order"]
        if request.headers.get("Authorization") != f"Bearer {shop.token}":
            shop.refused_auth[order] += 1
            return web.json_response({"error": "invalid token"}, status=401)
        shop.shipments.append(order)
        if order in shop.fail_after_commit:
            shop.fail_after_commit.discard(order)
            return web.Response(status=500, text="upstream error")
        return web.json_response({"tracking": f"t-{order}"})

    async def lookup(request: web.Request) -> web.Response:
        shop.lookups += 1
        order = request.match_info["order"]
        if order not in shop.shipments:
            return web.json_response({"error": "no such shipment"}, status=404)
        return web.json_response({"tracking": f"t-{order}"})

    app = web.Application()
    app.router.add_post("/shipments", ship)
    app.router.add_get("/shipments/{order}", lookup)
    return app


@contextlib.asynccontextmanager
async def serving(*apps: web.Application) -> AsyncIterator[list[str]]:
    runners = [web.AppRunner(app, access_log=None) for app in apps]
    try:
        urls = []
        for runner in runners:
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            server = site._server
            assert server is not None
            port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            urls.append(f"http://127.0.0.1:{port}")
        yield urls
    finally:
        for runner in runners:
            await runner.cleanup()


def write_config(tmp_path: Path, urls: list[str], ship_gives_up: str = "1h") -> Path:
    """``ship_gives_up``: the shipping verb's retry.give_up_after (a destination problem, such
    as a 401, is retried for that long, then blocks)."""
    stock, payments, shipping = urls
    fast = '{ initial_backoff = "50ms", max_backoff = "200ms", give_up_after = "%s" }'
    text = f"""
[dispatcher]
poll_interval = "50ms"
lease_margin = "2s"
shutdown_grace = "5s"

[destinations.stock]
base_url = "{stock}"
answers = "http"
[destinations.payments]
base_url = "{payments}"
answers = "http"
[destinations.shipping]
base_url = "{shipping}"
answers = "http"
timeout = "1s"
bearer_token_env = "{TOKEN_ENV}"

[verbs.reserve]
destination = "stock"
path = "/reservations"
retry = {fast % "1h"}
[verbs.release]
destination = "stock"
path = "/releases"
retry = {fast % "1h"}
[verbs.charge]
destination = "payments"
path = "/charges"
retry = {fast % "1h"}
[verbs.refund]
destination = "payments"
path = "/refunds"
retry = {fast % "1h"}
[verbs.ship]
destination = "shipping"
path = "/shipments"
retry = {fast % ship_gives_up}
[verbs.ship.probe]
path = "/shipments/{{args.order}}"
committed = [200]
not_committed = [404]
after = "0s"
every = "1s"
"""
    path = tmp_path / "effectusd.toml"
    path.write_text(text)
    return path


def order_plan(order: str, amount: int) -> dict[str, Any]:
    args = {"order": order, "amount": amount}
    return {
        "plan_id": "order",
        "steps": [
            {
                "id": "reserve",
                "verb": "reserve",
                "args": args,
                "compensate": {"verb": "release", "args": args},
            },
            {
                "id": "charge",
                "verb": "charge",
                "args": args,
                "compensate": {"verb": "refund", "args": args},
            },
            {"id": "ship", "verb": "ship", "args": args, "compensate": "none"},
        ],
    }


async def until(condition: Callable[[], bool], what: str) -> None:
    """Wait (bounded) for ``condition``, polling the in-process services' records."""
    async with asyncio.timeout(WAIT_S):
        while not condition():
            await asyncio.sleep(0.05)
    assert condition(), what


async def submit(client: AsyncClient, order: str, amount: int) -> str:
    submitted = await client.submit(order_plan(order, amount), execution_id=order)
    return submitted.saga_id


async def waited(client: AsyncClient, saga_id: str, *states: str) -> SagaView:
    return await client.wait(saga_id, timeout=WAIT_S, until=states)


def operator(config: Path, store_url: str, *args: str) -> None:
    """An operator command (`effectusd retry`, `cancel`) as a person runs it."""
    env = {"EFFECTUSD_CONFIG": None, "EFFECTUSD_DATABASE_URL": None}
    command = ["--config", str(config), "--database-url", store_url, *args]
    result = CliRunner().invoke(main, command, env=env)
    assert result.exit_code == 0, result.output


async def test_refusals_compensate_at_once_a_401_waits_for_the_fix_and_a_probe_settles_a_500(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "a" is answered 429 seven times: longer than the five attempts the old default allowed
    shop = Shop(fail_after_commit={"d"}, busy=Counter({"a": 7}))
    async with serving(stock_app(shop), payments_app(shop), shipping_app(shop)) as urls:
        config_path = write_config(tmp_path, urls)
        client = AsyncClient(load_config(config_path), database_url=store_url)
        monkeypatch.setenv(TOKEN_ENV, "shipping-token-expired")
        async with daemon_running(load_config(config_path), store_url):
            sagas = {
                order: await submit(client, order, amount)
                for order, amount in (("a", 10), ("b", 5000), ("c", -1), ("d", 20))
            }
            declined = await waited(client, sagas["b"], "compensated")
            refused = await waited(client, sagas["c"], "compensated")
            # the 401s keep coming and are retried: the orders wait, nothing is undone
            await until(lambda: min(shop.refused_auth[o] for o in "ad") >= 3, "401s retried")
            waiting = [await client.get(sagas[order]) for order in "ad"]
        assert [view.state for view in waiting] == ["running", "running"]
        ship = waiting[0].step("ship").dispatches[0]
        assert ship.state in ("retry_wait", "in_flight")
        assert "destination answered HTTP 401" in (ship.last_error or "")
        assert "invalid token" in (ship.last_error or "")

        monkeypatch.setenv(TOKEN_ENV, GOOD_TOKEN)  # the credential fixed, the daemon restarted
        async with daemon_running(load_config(config_path), store_url):
            shipped = await waited(client, sagas["a"], "completed")
            probed = await waited(client, sagas["d"], "completed")

    assert "402" in (declined.stop_reason or "") and "card declined" in (declined.stop_reason or "")
    assert "422" in (refused.stop_reason or "")
    assert shipped.step("ship").result == {"tracking": "t-a"}
    charged = shipped.step("charge").dispatches[0]
    assert [a.status_code for a in charged.attempts] == [429] * 7 + [200] and shop.busy["a"] == 0
    assert probed.stop_reason == "resolved by probe as committed" and shop.lookups >= 1
    assert "blocked_unknown" in [e.to_state for e in probed.timeline if e.kind == "saga_state"]
    # every effect once; the refused orders' reservations released; nothing else undone
    done = {"reservations": 1, "releases": 0, "charges": 1, "refunds": 0, "shipments": 1}
    undone = {"reservations": 1, "releases": 1, "charges": 0, "refunds": 0, "shipments": 0}
    assert {o: shop.effects(o) for o in "abcd"} == {
        "a": done,
        "b": undone,
        "c": undone,
        "d": done,
    }


async def test_a_401_past_its_budget_blocks_destination_and_retry_sends_it_again(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shop = Shop()
    async with serving(stock_app(shop), payments_app(shop), shipping_app(shop)) as urls:
        config_path = write_config(tmp_path, urls, ship_gives_up="300ms")
        client = AsyncClient(load_config(config_path), database_url=store_url)
        monkeypatch.setenv(TOKEN_ENV, "shipping-token-expired")
        async with daemon_running(load_config(config_path), store_url):
            saga_id = await submit(client, "e", 10)
            blocked = await waited(client, saga_id, "blocked_destination")
        assert shop.refused_auth["e"] >= 1 and shop.effects("e")["releases"] == 0
        assert blocked.next_actions[0].startswith(f"effectusd retry {saga_id}")
        assert any(a.startswith(f"effectusd cancel {saga_id}") for a in blocked.next_actions)
        reason = blocked.stop_reason or ""
        assert reason.startswith("ship (forward): destination answered HTTP 401")

        monkeypatch.setenv(TOKEN_ENV, GOOD_TOKEN)
        operator(config_path, store_url, "retry", saga_id, "--evidence", "token rotated")
        async with daemon_running(load_config(config_path), store_url):
            done = await waited(client, saga_id, "completed")
    assert done.step("ship").result == {"tracking": "t-e"}
    assert shop.effects("e") == {
        "reservations": 1,
        "releases": 0,
        "charges": 1,
        "refunds": 0,
        "shipments": 1,
    }


async def test_cancel_of_a_blocked_destination_order_compensates_what_succeeded(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shop = Shop()
    async with serving(stock_app(shop), payments_app(shop), shipping_app(shop)) as urls:
        config_path = write_config(tmp_path, urls, ship_gives_up="300ms")
        client = AsyncClient(load_config(config_path), database_url=store_url)
        monkeypatch.setenv(TOKEN_ENV, "shipping-token-expired")
        async with daemon_running(load_config(config_path), store_url):
            saga_id = await submit(client, "f", 10)
            await waited(client, saga_id, "blocked_destination")
            operator(config_path, store_url, "cancel", saga_id, "--evidence", "order withdrawn")
            undone = await waited(client, saga_id, "compensated")
    assert (undone.stop_reason or "").startswith("canceled by ")
    ship = undone.step("ship").dispatches[0]
    assert ship.state == "canceled" and shop.refused_auth["f"] >= 1
    assert shop.effects("f") == {
        "reservations": 1,
        "releases": 1,
        "charges": 1,
        "refunds": 1,
        "shipments": 0,
    }

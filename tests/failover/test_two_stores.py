"""Two stores on two PostgreSQL servers of their own (built as the failover pairs are, without a
standby), one fencing authority, and a destination-kit service that keeps a watermark per
resource and refuses a stale token: fenced charges on one shared account from both stores,
one server stopped mid-drain while the other's sagas all complete, then started again and
drained. Served by one `effectusd run` process over both stores, and by a daemon per store
(`run --store LABEL`), both with one configuration."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from effectusd.client import Client
from effectusd.config import Config, load_config
from tests.chaos import runner as chaos
from tests.conftest import drop_database
from tests.failover import cluster
from tests.support.authority import migrated_authority
from tests.support.harness import attempts_of, client_for, daemon_running, make_config
from tests.support.required import missing
from tests.support.services import serving

pytestmark = [pytest.mark.postgres, pytest.mark.chaos]
ROOT = Path(__file__).resolve().parents[2]
ORDERS = 16  # per store


@pytest.fixture(autouse=True, scope="module")
def _can_build_a_cluster() -> None:
    why = cluster.available()
    if why is not None:
        missing(why)


class Server(cluster.Pair):
    """One PostgreSQL server of its own: the pair's primary, with no standby."""

    def build(self) -> None:
        self._run(
            cluster.BIN / "initdb", "-D", self.primary, "-U", "postgres", "--auth=trust", "-N"
        )
        with (self.primary / "postgresql.conf").open("a") as conf:
            conf.write(
                f"port = {self.primary_port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.root}'\nfsync = off\nmax_connections = 60\n"
            )
        self.start(self.primary)

    def store_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.primary_port}/effectusd?connect_timeout=2"


@contextmanager
def server() -> Iterator[Server]:
    root = Path(tempfile.mkdtemp(prefix="effectusd-stores-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    built = Server(root, synchronous=False)
    try:
        built.build()
        built.create_database("effectusd")
        chaos._migrate(built.store_url())
        yield built
    finally:
        built.close()
        shutil.rmtree(root, ignore_errors=True)


def configuration(base_url: str, authority: str, stores: dict[str, str], label: str) -> Config:
    verb = {
        "path": "/payments/charge",
        "fencing": ["account:{args.account_id}"],
        "delivery": "at_least_once",  # a call whose answer was lost is sent again: the kit replays
        "retry": {"max_attempts": 50, "initial_backoff": "50ms", "max_backoff": "1s"},
    }
    database = {
        "stores": {
            name: {"url": url, "namespace": f"tenant-{name}"} for name, url in stores.items()
        }
    }
    config = make_config(base_url, {"charge": verb}, fencing={"url": authority}, database=database)
    return config.model_copy(update={"namespace": f"tenant-{label}"})


def submit(client: Client, label: str) -> list[str]:
    args: dict[str, Any] = {"account_id": "shared", "amount": 100, "currency": "EUR"}
    step = {"id": "charge", "verb": "charge", "compensate": "none"}
    return [
        client.submit(
            {"plan_id": "pay", "steps": [{**step, "args": {**args, "order": f"{label}-{n}"}}]},
            execution_id=f"{label}-{n}",
        ).saga_id
        for n in range(ORDERS)
    ]


def states(client: Client, sagas: list[str]) -> list[str]:
    try:
        return [getattr(client.get(saga), "state", "missing") for saga in sagas]
    except Exception:  # noqa: BLE001 - the store is down: nothing is known to be done
        return ["unknown"] * len(sagas)


def charged(shop: Path, label: str) -> int:
    with sqlite3.connect(shop) as conn:
        [(n,)] = conn.execute(
            "SELECT count(*) FROM kit_shop_charges WHERE order_id LIKE ?", (f"{label}-%",)
        ).fetchall()
    return int(n)


async def until(predicate: Any, timeout: float = 120.0) -> None:
    async with asyncio.timeout(timeout):
        while not await asyncio.to_thread(predicate):
            await asyncio.sleep(0.1)


async def test_two_servers_fence_one_account_through_the_authority_and_a_stopped_one_drains_after(
    tmp_path: Path,
) -> None:
    shop = tmp_path / "shop.db"
    authority = migrated_authority()
    command = [sys.executable, str(ROOT / "contrib" / "kit_shop_service.py"), "--port", "0"]
    try:
        with (
            server() as east,
            server() as west,
            serving([*command, "--database-url", f"sqlite:///{shop}"], cwd=tmp_path) as base,
        ):
            urls = {"east": east.store_url(), "west": west.store_url()}
            configs = {label: configuration(base, authority, urls, label) for label in urls}
            clients = {label: client_for(configs[label], urls[label]) for label in urls}
            sagas = {label: submit(clients[label], label) for label in urls}
            async with (
                daemon_running(configs["east"], urls["east"], store_label="east"),
                daemon_running(configs["west"], urls["west"], store_label="west"),
            ):
                # mid-drain: some of east's charges made, then its server stops
                await until(lambda: states(clients["east"], sagas["east"]).count("completed") >= 2)
                await asyncio.to_thread(east.stop, east.primary, "immediate")
                charged_at_stop = charged(shop, "east")
                await until(
                    lambda: states(clients["west"], sagas["west"]) == ["completed"] * ORDERS
                )
                await asyncio.to_thread(east.start, east.primary)
                await until(
                    lambda: states(clients["east"], sagas["east"]) == ["completed"] * ORDERS
                )
            attempts = charges(urls, sagas)
    finally:
        drop_database(authority)

    assert_fenced_once(shop, charged_at_stop, attempts)


def charges(urls: dict[str, str], sagas: dict[str, list[str]]) -> dict[str, list[Any]]:
    """Every attempt of every saga's charge, by store."""
    return {
        label: [a for saga in sagas[label] for a in attempts_of(urls[label], saga, "charge")]
        for label in urls
    }


def assert_fenced_once(
    shop: Path, charged_at_stop: int, attempts: dict[str, list[dict[str, Any]]]
) -> None:
    """Both stores' orders charged once each, no token refused by the kit, none repeated."""
    with sqlite3.connect(shop) as conn:
        charges = conn.execute("SELECT order_id FROM kit_shop_charges").fetchall()
        [(mark,)] = conn.execute(
            "SELECT token FROM effectus_dest_watermarks WHERE resource = 'account:shared'"
        ).fetchall()
        committed = {
            request for (request,) in conn.execute("SELECT request_id FROM effectus_dest_keys")
        }
    # mid-drain: some of east's charges were made, not all, when its server stopped
    assert 2 <= charged_at_stop < ORDERS
    orders = sorted(order for (order,) in charges)
    # 0 lost, 0 duplicates: every order of both stores charged, none twice
    assert orders == sorted(f"{label}-{n}" for label in ("east", "west") for n in range(ORDERS))
    sent = [a for label in attempts for a in attempts[label] if a["sent_at"] is not None]
    # the kit refused no token as stale: every grant was above the last it had taken
    assert all(a["fencing_status"] != "stale_rejected" for a in sent)
    assert not any("stale" in (a["error"] or "") for a in sent)
    tokens = [g["token"] for a in sent for g in a["grants"] or []]
    # the watermark is the last token a charge committed with: a request the kit answered
    # from its ledger (an answer lost with the stopped server, sent again) raises nothing
    assert mark == max(
        g["token"] for a in sent if str(a["request_id"]) in committed for g in a["grants"]
    )
    assert committed <= {str(a["request_id"]) for a in sent}  # each written ahead as sent
    assert len(set(tokens)) == len(tokens)  # no token granted twice, across both stores


def one_daemon_config(tmp: Path, base_url: str, authority: str, urls: dict[str, str]) -> Path:
    """The TOML of one `effectusd run` over both stores, with the authority and the kit's
    charge verb; its HTTP endpoints on a port free now."""
    with socket.socket() as probe:  # a port free now, for the daemon's endpoints
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    stores = "".join(
        f'[database.stores.{label}]\nurl = "{url}"\nnamespace = "tenant-{label}"\n'
        for label, url in urls.items()
    )
    path = tmp / "effectusd.toml"
    path.write_text(
        f'[dispatcher]\npoll_interval = "50ms"\nlease_margin = "2s"\nshutdown_grace = "5s"\n'
        f"[observability]\nhttp_port = {port}\n"
        f'[fencing]\nurl = "{authority}"\n'
        f'[destinations.dest]\nbase_url = "{base_url}"\ntimeout = "2s"\nmax_concurrency = 16\n'
        '[verbs.charge]\ndestination = "dest"\npath = "/payments/charge"\n'
        'fencing = ["account:{args.account_id}"]\ndelivery = "at_least_once"\n'
        'retry = { max_attempts = 50, initial_backoff = "50ms", max_backoff = "1s" }\n' + stores
    )
    return path


def readyz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError:  # not listening yet
        return 0, ""


def east_named_unready(port: int) -> bool:
    code, text = readyz(port)
    return code == 503 and json.loads(text)["stores"]["east"]["ok"] is False


async def test_one_daemon_over_two_servers_fences_one_account_and_drains_a_stopped_one_after(
    tmp_path: Path,
) -> None:
    shop = tmp_path / "shop.db"
    authority = migrated_authority()
    command = [sys.executable, str(ROOT / "contrib" / "kit_shop_service.py"), "--port", "0"]
    log = tmp_path / "daemon.log"
    try:
        with (
            server() as east,
            server() as west,
            serving([*command, "--database-url", f"sqlite:///{shop}"], cwd=tmp_path) as base,
        ):
            urls = {"east": east.store_url(), "west": west.store_url()}
            path = one_daemon_config(tmp_path, base, authority, urls)
            loaded = load_config(path)
            port = loaded.observability.http_port
            assert port is not None
            clients = {
                label: client_for(
                    loaded.model_copy(update={"namespace": f"tenant-{label}"}), urls[label]
                )
                for label in urls
            }
            sagas = {label: submit(clients[label], label) for label in urls}
            with log.open("wb") as stderr:
                daemon = subprocess.Popen(
                    [sys.executable, "-m", "effectusd.cli", "--config", str(path), "run"],
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                )
            try:
                # mid-drain: some of east's charges made, then its server stops
                await until(lambda: states(clients["east"], sagas["east"]).count("completed") >= 2)
                await asyncio.to_thread(east.stop, east.primary, "immediate")
                charged_at_stop = charged(shop, "east")
                # west's sagas all complete through the same process while east is down:
                # once east's dead claim's lease on the authority ran out (the dispatch lease
                # plus 10 s), not held back while east's claims wait out its pool (30 s)
                await until(
                    lambda: states(clients["west"], sagas["west"]) == ["completed"] * ORDERS,
                    timeout=25,
                )
                await until(lambda: east_named_unready(port))
                down = readyz(port)[1]
                await asyncio.to_thread(east.start, east.primary)
                await until(
                    lambda: states(clients["east"], sagas["east"]) == ["completed"] * ORDERS
                )
                assert daemon.poll() is None, log.read_text()  # the one process, all along
            finally:
                daemon.send_signal(signal.SIGTERM)
                assert daemon.wait(timeout=60) == 0, log.read_text()
            attempts = charges(urls, sagas)
    finally:
        drop_database(authority)

    stores = json.loads(down)["stores"]
    assert stores["west"]["ok"] is True
    assert stores["east"]["ok"] is False and stores["east"]["namespace"] == "tenant-east"
    assert f":{east.primary_port}/" not in down and "postgresql://" not in down
    assert_fenced_once(shop, charged_at_stop, attempts)

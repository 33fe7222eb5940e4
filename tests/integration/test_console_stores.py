"""The console over several stores, on two real PostgreSQL databases and a real server on
127.0.0.1: lists across stores with each row's label, a store that is down named (never its
URL) while the others are shown, a saga found and acted on in whichever store holds it, and a
name that fits sagas in two stores refused naming each with its label."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from effectusd.console import Console
from effectusd.console.stores import Served
from effectusd.store.sql import store_backend
from effectusd.web import WebServer
from tests.conftest import ADMIN_URL, create_database, drop_database
from tests.integration.test_cli_stores import (
    CONFIG,
    DOWN,
    NAMESPACES,
    SECRET,
    cli,
    state,
    stores_file,
    submit,
    two_stores,
)
from tests.integration.test_console_browser import WAIT_S, _sign_in, browser
from tests.support.console import (
    TOKEN_ENV,
    TOKENS,
    WRITE_TOKEN,
    bearer,
    csrf_of,
    login,
    with_console,
)

pytestmark = pytest.mark.postgres

__all__ = ["browser", "two_stores"]  # the fixtures, used by name

CONSOLE = with_console(CONFIG, tokens=TOKENS)
AUTH = bearer(WRITE_TOKEN)
# What a page or a document must never show of the store that is down.
DOWN_PARTS = (SECRET, "127.0.0.1:1", "port 1", "postgres:")


def served(urls: Mapping[str, str]) -> list[Served]:
    """Each store by its label, with its namespace, as `effectusd console` serves them."""
    return [
        Served(
            CONSOLE.model_copy(update={"namespace": NAMESPACES[label]}),
            store_backend(url),
            label,
            f"store {label!r}",
        )
        for label, url in urls.items()
    ]


@contextlib.asynccontextmanager
async def console_over(urls: Mapping[str, str]) -> AsyncIterator[httpx.AsyncClient]:
    """A console over the stores ``urls`` names, on 127.0.0.1; yields a client of it."""
    console = Console(CONSOLE, served(urls), "127.0.0.1", environ=TOKEN_ENV)
    server = WebServer("console", console.install)
    port = await server.start("127.0.0.1", 0)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            yield http
    finally:
        await server.close()


async def cancel_by_form(
    http: httpx.AsyncClient, name: str
) -> tuple[httpx.Response, httpx.Response]:
    """Signed in: the page of the saga ``name`` names, then its cancel form sent from it."""
    page = await http.get(f"/sagas/{name}")
    canceled = await http.post(
        f"/sagas/{name}/cancel",
        data={"csrf": csrf_of(page.text), "evidence": "tenant asked"},
        headers={"Origin": str(http.base_url).rstrip("/")},
    )
    return page, canceled


def without_down(text: str) -> None:
    for part in DOWN_PARTS:
        assert part not in text


async def test_lists_sagas_of_every_store_newest_first_and_names_a_store_that_is_down(
    two_stores: dict[str, str],
) -> None:
    first = submit(CONFIG, two_stores["east"], "east", "e-1")
    second = submit(CONFIG, two_stores["west"], "west", "w-1")
    third = submit(CONFIG, two_stores["east"], "east", "e-2")

    async with console_over({**two_stores, "down": DOWN}) as http:
        listed = await http.get("/api/sagas", headers=AUTH)
        newest = await http.get("/api/sagas", params={"limit": "1"}, headers=AUTH)
        overview = await http.get("/api/overview", headers=AUTH)
        await login(http, WRITE_TOKEN)
        page = await http.get("/sagas")

    assert listed.status_code == 200, listed.text
    data = listed.json()
    assert [(row["store"], row["saga_id"]) for row in data["sagas"]] == [
        ("east", third),
        ("west", second),
        ("east", first),
    ]
    assert list(data["unreached"]) == ["down"]
    assert [row["saga_id"] for row in newest.json()["sagas"]] == [third]
    counts = overview.json()
    assert counts["live_sagas"] == {"running": 3}
    assert {label: sum(s["live_sagas"].values()) for label, s in counts["stores"].items()} == {
        "east": 2,
        "west": 1,
    }
    assert list(counts["unreached"]) == ["down"]
    assert page.status_code == 200
    assert "store &#x27;down&#x27; could not be read" in page.text
    assert page.text.index(third[:16]) < page.text.index(second[:16]) < page.text.index(first[:16])
    assert "<th>store</th>" in page.text
    for text in (listed.text, overview.text, page.text):
        without_down(text)


async def test_a_saga_is_shown_and_acted_on_in_the_store_that_holds_it(
    two_stores: dict[str, str],
) -> None:
    east = submit(CONFIG, two_stores["east"], "east", "e-1")
    west = submit(CONFIG, two_stores["west"], "west", "w-1")
    prefix = west[:12] if not east.startswith(west[:12]) else west[:20]

    async with console_over(two_stores) as http:
        whole = await http.get(f"/api/sagas/{west}", headers=AUTH)
        started = await http.get(f"/api/sagas/{prefix}", headers=AUTH)
        await login(http, WRITE_TOKEN)
        page, canceled = await cancel_by_form(http, prefix)
        retried = await http.post(
            f"/api/sagas/{west}/retry", json={"evidence": "again"}, headers=AUTH
        )

    assert whole.status_code == 200 and whole.json()["saga_id"] == west
    assert started.json()["saga_id"] == west
    assert started.json()["namespace"] == NAMESPACES["west"]
    assert page.status_code == 200 and "<td>west</td>" in page.text and west in page.text
    assert canceled.status_code == 303, canceled.text
    assert state(two_stores["west"], west) == "compensated"
    assert state(two_stores["east"], east) == "running"
    # found in west, where it has finished: nothing to retry
    assert retried.status_code == 409 and retried.json()["refused"] == "conflict"


async def test_an_action_reports_the_store_that_held_the_saga(
    two_stores: dict[str, str],
) -> None:
    east = submit(CONFIG, two_stores["east"], "east", "e-1")

    async with console_over(two_stores) as http:
        canceled = await http.post(
            f"/api/sagas/{east}/cancel", json={"evidence": "tenant asked"}, headers=AUTH
        )

    assert canceled.status_code == 200, canceled.text
    assert (canceled.json()["saga_id"], canceled.json()["store"]) == (east, "east")
    assert state(two_stores["east"], east) == "compensated"


async def test_an_action_on_a_store_that_takes_no_writes_is_refused_naming_it_and_writes_nothing(
    two_stores: dict[str, str],
) -> None:
    east = submit(CONFIG, two_stores["east"], "east", "e-1")
    west = submit(CONFIG, two_stores["west"], "west", "w-1")
    read_only(two_stores["east"], True)  # as a standby, or a database being moved, is
    try:
        async with console_over(two_stores) as http:
            shown = await http.get(f"/api/sagas/{east}", headers=AUTH)
            refused = await http.post(
                f"/api/sagas/{east}/cancel", json={"evidence": "tenant asked"}, headers=AUTH
            )
            await login(http, WRITE_TOKEN)
            _, form = await cancel_by_form(http, east)
            canceled = await http.post(
                f"/api/sagas/{west}/cancel", json={"evidence": "tenant asked"}, headers=AUTH
            )
    finally:
        read_only(two_stores["east"], False)

    assert shown.status_code == 200  # read, as ever
    assert refused.status_code == 503, refused.text
    assert refused.json()["refused"] == "unreached"
    assert refused.json()["error"].startswith("store 'east' takes no writes")
    assert form.status_code == 503 and "store &#x27;east&#x27; takes no writes" in form.text
    assert state(two_stores["east"], east) == "running"  # nothing written
    assert canceled.status_code == 200, canceled.text  # the other store acts as ever
    assert state(two_stores["west"], west) == "compensated"


def read_only(url: str, on: bool) -> None:
    """Make the database at ``url`` take no writes from new connections (or again take them)."""
    name = url.rsplit("/", 1)[1].split("?")[0]
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = {on}')


async def test_a_prefix_fitting_sagas_in_two_stores_is_refused_naming_each_with_its_label(
    two_stores: dict[str, str],
) -> None:
    east = submit(CONFIG, two_stores["east"], "east", "e-1")
    west = next(  # a west saga whose id starts as east's does (1 in 16 do)
        saga
        for n in range(200)
        if (saga := submit(CONFIG, two_stores["west"], "west", f"w-{n}"))[0] == east[0]
    )

    async with console_over(two_stores) as http:
        shown = await http.get(f"/api/sagas/{east[0]}", headers=AUTH)
        canceled = await http.post(
            f"/api/sagas/{east[0]}/cancel", json={"evidence": "which?"}, headers=AUTH
        )
        await login(http, WRITE_TOKEN)
        page = await http.get(f"/sagas/{east[0]}")

    assert shown.status_code == 409
    refusal = shown.json()
    assert refusal["refused"] == "ambiguous"
    assert "it fits sagas in stores east, west" in refusal["error"]
    assert {(c["store"], c["saga_id"]) for c in refusal["candidates"]} >= {
        ("east", east),
        ("west", west),
    }
    assert canceled.status_code == 409 and canceled.json()["refused"] == "ambiguous"
    assert state(two_stores["east"], east) == "running"
    assert state(two_stores["west"], west) == "running"
    assert page.status_code == 409
    assert f'href="/sagas/{east}"' in page.text and f'href="/sagas/{west}"' in page.text


async def test_a_saga_no_reachable_store_holds_names_the_store_that_could_not_be_searched(
    two_stores: dict[str, str],
) -> None:
    unknown = "ab" * 32

    async with console_over({"east": two_stores["east"], "down": DOWN}) as http:
        shown = await http.get(f"/api/sagas/{unknown}", headers=AUTH)
        retried = await http.post(
            f"/api/sagas/{unknown}/retry", json={"evidence": "x"}, headers=AUTH
        )
    async with console_over(two_stores) as http:
        nowhere = await http.get(f"/api/sagas/{unknown}", headers=AUTH)

    assert shown.status_code == 503
    assert shown.json()["refused"] == "unreached"
    assert (
        "not in stores searched (east); store 'down' could not be searched"
        in (shown.json()["error"])
    )
    assert retried.status_code == 503 and retried.json()["refused"] == "unreached"
    without_down(shown.text + retried.text)
    assert nowhere.status_code == 404
    assert nowhere.json()["error"] == f"saga {unknown}: in none of the stores (east, west)"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


Started = tuple[str, "subprocess.Popen[str]"]


@pytest.fixture
def consoles(two_stores: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., Started]]:
    """Start `effectusd console` (with the given options) over east, west and a store that is
    down: its base URL once it answers, and the process (its stderr a pipe)."""
    config = stores_file(tmp_path, CONFIG, {**two_stores, "down": DOWN})
    env = {k: v for k, v in os.environ.items() if not k.startswith("EFFECTUSD_")}
    started: list[subprocess.Popen[str]] = []

    def start(*options: str) -> Started:
        port = _free_port()
        command = [sys.executable, "-m", "effectusd.cli", "--config", str(config), "console"]
        process = subprocess.Popen(
            [*command, "--port", str(port), *options], env=env, stderr=subprocess.PIPE, text=True
        )
        started.append(process)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:  # polling for the server to listen, under a deadline
            assert process.poll() is None, process.stderr and process.stderr.read()
            with contextlib.suppress(httpx.TransportError):
                httpx.get(f"{base}/login", timeout=5)
                return base, process
            assert time.monotonic() < deadline, "the console did not start"
            time.sleep(0.05)

    yield start
    for process in started:
        process.terminate()
        process.wait(timeout=30)
        if process.stderr is not None:
            process.stderr.close()


def stopped(process: subprocess.Popen[str]) -> str:
    """Stop ``process``: what it said on stderr."""
    process.terminate()
    process.wait(timeout=30)
    assert process.stderr is not None
    return process.stderr.read()


def test_effectusd_console_serves_every_store_and_names_the_one_it_could_not_read(
    two_stores: dict[str, str], consoles: Callable[..., Started]
) -> None:
    west = submit(CONFIG, two_stores["west"], "west", "w-1")
    base, process = consoles()

    listed = httpx.get(f"{base}/api/sagas", timeout=30)

    assert listed.status_code == 200, listed.text
    assert [(row["store"], row["saga_id"]) for row in listed.json()["sagas"]] == [("west", west)]
    assert list(listed.json()["unreached"]) == ["down"]
    stderr = stopped(process)
    assert "warning: store 'down' could not be read:" in stderr
    without_down(listed.text + stderr)


def test_effectusd_console_store_serves_that_store_alone(
    two_stores: dict[str, str], consoles: Callable[..., Started], tmp_path: Path
) -> None:
    submit(CONFIG, two_stores["west"], "west", "w-1")
    east = submit(CONFIG, two_stores["east"], "east", "e-1")
    base, process = consoles("--store", "east")

    listed = httpx.get(f"{base}/api/sagas", timeout=30)
    unknown = cli(stores_file(tmp_path, CONFIG, two_stores), "console", "--store", "north")

    assert [(row["store"], row["saga_id"]) for row in listed.json()["sagas"]] == [("east", east)]
    assert listed.json()["unreached"] == {}
    assert "could not be read" not in stopped(process)  # the store that is down is not served
    assert unknown.exit_code == 2
    assert "--store north: no such store; stores: east, west" in unknown.stderr


def _search_and_open(driver: Any, base: str, saga: str) -> tuple[list[str], str]:
    """Sign in, list the sagas, open ``saga`` from the list: the list's store cells and the
    saga page's text."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, WAIT_S)
    driver.get(f"{base}/sagas")
    wait.until(ready.url_contains("/login"))
    _sign_in(driver, WRITE_TOKEN)
    driver.get(f"{base}/sagas")
    listed = "//table[.//th[text()='store']]"
    table = wait.until(ready.presence_of_element_located((By.XPATH, listed)))
    rows = table.find_elements(By.XPATH, ".//tr[td]")
    stores = [row.find_element(By.TAG_NAME, "td").text for row in rows]
    table.find_element(By.CSS_SELECTOR, f"a[href='/sagas/{saga}']").click()
    wait.until(ready.presence_of_element_located((By.CSS_SELECTOR, "p.saga-id")))
    return stores, str(driver.find_element(By.TAG_NAME, "body").text)


async def test_in_chromium_the_list_names_each_store_and_a_saga_opens_from_its_own(
    two_stores: dict[str, str], browser: Any
) -> None:
    east = submit(CONFIG, two_stores["east"], "east", "e-1")
    west = submit(CONFIG, two_stores["west"], "west", "w-1")

    async with console_over({**two_stores, "down": DOWN}) as http:
        stores, text = await asyncio.to_thread(
            _search_and_open, browser, str(http.base_url).rstrip("/"), west
        )

    assert stores == ["west", "east"]
    assert west in text and east not in text
    assert "west running p w-1" in " ".join(text.split())  # its store heads the saga's facts


async def test_a_store_not_migrated_is_named_saying_so_and_the_others_shown(
    two_stores: dict[str, str],
) -> None:
    west = submit(CONFIG, two_stores["west"], "west", "w-1")
    empty = create_database("effectusd_store_empty")
    try:
        async with console_over({"west": two_stores["west"], "east": empty}) as http:
            listed = await http.get("/api/sagas", headers=AUTH)
            shown = await http.get(f"/api/sagas/{west}", headers=AUTH)
    finally:
        drop_database(empty)

    assert [row["saga_id"] for row in listed.json()["sagas"]] == [west]
    assert "effectusd migrate" in listed.json()["unreached"]["east"]
    assert shown.status_code == 200 and shown.json()["saga_id"] == west


async def test_with_one_store_a_saga_is_found_by_a_unique_start_and_a_shared_one_is_refused(
    two_stores: dict[str, str],
) -> None:
    url = two_stores["east"]
    first = submit(CONFIG, url, "east", "e-0")
    second = next(  # an east saga whose id starts as the first's does (1 in 16 do)
        saga
        for n in range(1, 200)
        if (saga := submit(CONFIG, url, "east", f"e-{n}"))[0] == first[0]
    )
    config = CONSOLE.model_copy(update={"namespace": NAMESPACES["east"]})
    console = Console(config, store_backend(url), "127.0.0.1", environ=TOKEN_ENV)
    server = WebServer("console", console.install)
    port = await server.start("127.0.0.1", 0)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            unique = await http.get(f"/api/sagas/{second[:20]}", headers=AUTH)
            shared = await http.get(f"/api/sagas/{first[0]}", headers=AUTH)
            listed = await http.get("/api/sagas", headers=AUTH)
    finally:
        await server.close()

    assert unique.status_code == 200 and unique.json()["saga_id"] == second
    assert shared.status_code == 409 and shared.json()["refused"] == "ambiguous"
    assert {c["saga_id"] for c in shared.json()["candidates"]} >= {first, second}
    assert all("store" not in c for c in shared.json()["candidates"])
    # one store, as ever: no labels, no unreached
    assert "unreached" not in listed.json()
    assert all("store" not in row for row in listed.json()["sagas"])

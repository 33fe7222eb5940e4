"""The console in a real headless Chromium (Debian's chromium and chromium-driver): sign in,
find the blocked saga, open it, read the evidence, resolve it through the form beside that
evidence, and see it complete; and what a read-only viewer sees.

Without Chromium the test skips locally; with EFFECTUSD_REQUIRE_POSTGRES=1 (CI, which
installs it: .ci/run) it fails instead, as a missing PostgreSQL does.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.test_operator import UNKNOWN, answer, events
from tests.support import required
from tests.support.console import (
    READ_TOKEN,
    TOKEN_ENV,
    TOKENS,
    WRITE_TOKEN,
    daemon_with_console,
    with_console,
)
from tests.support.destination import running
from tests.support.harness import client_for, make_config, serial_plan

pytestmark = pytest.mark.postgres

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT_S = 30


@pytest.fixture
def browser() -> Iterator[Any]:
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not shutil.which(path)]
    if missing:
        message = f"the browser test needs {' and '.join(missing)} (apt-get install chromium "
        message += "chromium-driver)"
        required.missing(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


async def _in_thread(function: Any, *args: Any) -> Any:
    """Drive the browser off the event loop: the daemon and the console run on it."""
    return await asyncio.to_thread(function, *args)


def _sign_in(driver: Any, token: str) -> None:
    """Sign in on the login page the browser shows."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.ui import WebDriverWait

    driver.find_element(By.NAME, "token").send_keys(token)
    login_page = driver.current_url
    driver.find_element(By.CSS_SELECTOR, "form[action='/login'] button").click()
    # the sign-in page has the same header links: wait until the signed-in page replaced it,
    # by its address (asking an element of the page being replaced whether it is stale can
    # fail in Chromium with "Node ... does not belong to the document" mid-navigation)
    WebDriverWait(driver, WAIT_S).until(ready.url_changes(login_page))


def _sign_in_and_resolve(driver: Any, base: str, saga: str) -> str:
    """What an operator does: sign in, open Blocked, resolve the saga's step with evidence.
    Returns the text of the saga page once it says completed."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.select import Select
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, WAIT_S)
    driver.get(f"{base}/blocked")  # no session yet: the console sends us to sign in
    wait.until(ready.url_contains("/login"))
    _sign_in(driver, WRITE_TOKEN)
    wait.until(ready.presence_of_element_located((By.LINK_TEXT, "Blocked"))).click()
    card = wait.until(
        ready.presence_of_element_located((By.CSS_SELECTOR, f"div[data-saga='{saga}']"))
    )
    assert "blocked_unknown" in card.text and "HTTP 503" in card.text  # the evidence
    card.find_element(By.CSS_SELECTOR, f"a[href='/sagas/{saga}']").click()
    step = wait.until(
        ready.presence_of_element_located((By.CSS_SELECTOR, "div.step[data-step='s1']"))
    )
    # the saga page: the attempt's status code, error and key, the form beside them
    cells = [cell.text for cell in step.find_elements(By.TAG_NAME, "td")]
    assert "503" in cells and "unknown_outcome" in " ".join(cells)
    assert step.find_element(By.CSS_SELECTOR, ".key").text.strip() != "-"
    form = step.find_element(By.CSS_SELECTOR, "form[data-action='resolve']")
    placeholder = form.find_element(By.NAME, "result_json").get_attribute("placeholder")
    assert placeholder == "what s1 returned, as JSON (optional)"
    Select(form.find_element(By.NAME, "decision")).select_by_value("committed")
    form.find_element(By.NAME, "result_json").send_keys('{"charge": "c-1"}')
    form.find_element(By.NAME, "evidence").send_keys("ledger shows the charge for s1")
    form.find_element(By.NAME, "actor").send_keys("alice")
    form.find_element(By.CSS_SELECTOR, "button[type='submit']").click()
    wait.until(ready.url_contains(f"/sagas/{saga}?did=resolve"))
    assert "resolve recorded" in driver.find_element(By.CSS_SELECTOR, ".notice").text

    def completed(driver: Any) -> bool:
        driver.refresh()
        return "completed" in driver.find_element(By.CSS_SELECTOR, "span.state").text

    WebDriverWait(driver, WAIT_S, poll_frequency=0.2).until(completed)
    return str(driver.find_element(By.TAG_NAME, "body").text)


async def test_an_operator_resolves_a_blocked_saga_in_chromium_and_sees_it_complete(
    db: str, browser: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in TOKEN_ENV.items():
        monkeypatch.setenv(name, value)
    with running(answer({("s1", "forward", None): UNKNOWN})) as dest:
        config = make_config(dest.base_url, {"pay": {}, "ship": {}}, observability={"http_port": 0})
        config = with_console(config, tokens=TOKENS)
        plan = {
            "plan_id": "browser",
            "steps": [
                {"id": "s1", "verb": "pay", "args": {"n": 1}, "compensate": "none"},
                {
                    "id": "s2",
                    "verb": "ship",
                    "args": {"charge": {"$result": "s1", "path": "/charge"}},
                    "compensate": "none",
                },
            ],
        }
        client = client_for(config, db)
        saga = client.submit(plan, execution_id="b-1").saga_id
        async with daemon_with_console(config, db) as daemon:
            async with asyncio.timeout(WAIT_S):
                while getattr(client.get(saga), "state", None) != "blocked_unknown":
                    await asyncio.sleep(0.05)
            assert daemon.http_port is not None
            base = f"http://127.0.0.1:{daemon.http_port}"
            page = await _in_thread(_sign_in_and_resolve, browser, base, saga)
        assert "operator_resolve" in page and "console:oncall/alice" in page
        [shipped] = dest.seen("s2")
        assert shipped.json() == {"charge": "c-1"}  # the form's result fed the next step
        [resolved] = events(db, saga, "operator_resolve")
        assert resolved["actor"] == "console:oncall/alice"
        assert resolved["evidence"] == "ledger shows the charge for s1"


def _read_only_view(driver: Any, base: str, saga: str) -> tuple[int, str]:
    """Sign in with the read token and open the saga: its forms and its text."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, WAIT_S)
    driver.get(f"{base}/login")
    _sign_in(driver, READ_TOKEN)
    driver.get(f"{base}/sagas/{saga}")
    wait.until(ready.presence_of_element_located((By.CSS_SELECTOR, "div.step[data-step='s1']")))
    forms = driver.find_elements(By.CSS_SELECTOR, "form.action")
    return len(forms), str(driver.find_element(By.TAG_NAME, "body").text)


async def test_a_read_only_viewer_sees_the_evidence_and_no_action_form_in_chromium(
    db: str, browser: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in TOKEN_ENV.items():
        monkeypatch.setenv(name, value)
    with running(answer({("s1", "forward", None): UNKNOWN})) as dest:
        config = make_config(dest.base_url, {"pay": {}}, observability={"http_port": 0})
        config = with_console(config, tokens=TOKENS)
        client = client_for(config, db)
        saga = client.submit(serial_plan("read-only", ["pay"]), execution_id="r-1").saga_id
        async with daemon_with_console(config, db) as daemon:
            async with asyncio.timeout(WAIT_S):
                while getattr(client.get(saga), "state", None) != "blocked_unknown":
                    await asyncio.sleep(0.05)
            assert daemon.http_port is not None
            base = f"http://127.0.0.1:{daemon.http_port}"
            forms, text = await _in_thread(_read_only_view, browser, base, saga)
    assert forms == 0
    assert "You may read here, not act" in text and "503" in text

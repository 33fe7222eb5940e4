"""The console's saga page against a real store: the evidence `sagas show` carries, the
Resolve form beside the dispatch it settles, and no form for whoever may not act."""

from __future__ import annotations

import html
import re
from typing import Any

import httpx
import pytest

from tests.integration.test_console_api import _blocked_unknown
from tests.integration.test_dispatcher_leases import wait_for
from tests.integration.test_operator import PERMANENT, UNKNOWN, answer, saga_row
from tests.support.console import (
    READ_TOKEN,
    TOKENS,
    WRITE_TOKEN,
    console_running,
    csrf_of,
    login,
    with_console,
)
from tests.support.destination import go_down, running
from tests.support.harness import (
    attempts_of,
    client_for,
    daemon_running,
    make_config,
    run_until_idle,
    serial_plan,
)

pytestmark = pytest.mark.postgres

CHARGE_SCHEMA = {
    "type": "object",
    "properties": {"charge": {"type": "string"}, "cents": {"type": "integer"}},
}


def step_card(page: str, effect_id: str) -> str:
    match = re.search(rf'<div class="card step" data-step="{effect_id}">(.*?)</div>', page, re.S)
    assert match is not None, f"no card for step {effect_id}"
    return html.unescape(match.group(1))


async def _pages(base: str, token: str | None, *paths: str) -> list[str]:
    async with httpx.AsyncClient(base_url=base) as http:
        if token is not None:
            await login(http, token)
        answers = [await http.get(path) for path in paths]
    assert [a.status_code for a in answers] == [200] * len(paths)
    return [a.text for a in answers]


async def test_the_saga_page_shows_every_attempts_evidence_with_resolve_beside_it(
    db: str,
) -> None:
    with running(answer({("s1", "forward", None): UNKNOWN})) as dest:
        config, saga = await _blocked_unknown(db, dest.base_url)
        async with console_running(with_console(config, tokens=TOKENS), db) as base:
            async with httpx.AsyncClient(base_url=base) as http:
                view: dict[str, Any] = (
                    await http.get(
                        f"/api/sagas/{saga}", headers={"Authorization": f"Bearer {READ_TOKEN}"}
                    )
                ).json()
            [page] = await _pages(base, WRITE_TOKEN, f"/sagas/{saga}")
    s1, s2 = step_card(page, "s1"), step_card(page, "s2")
    [dispatch] = view["steps"][0]["dispatches"]  # s1's, the one that stopped the saga
    [attempt] = dispatch["attempts"]
    assert dispatch["idempotency_key"] in s1
    assert attempt["sent_at"] in s1 and attempt["error"] in s1
    assert re.search(r"<td>503</td>", s1)  # the status code the destination answered
    assert dispatch["destination"] in s1 and "/pay" in s1
    assert "after s1" in s2 and "runs first" in s1
    assert 'data-action="resolve"' in s1 and 'data-action="resolve"' not in s2
    assert 'name="effect_id" value="s1"' in s1


async def test_a_viewer_who_may_not_act_sees_no_form_and_is_told_why(db: str) -> None:
    with running(answer({("s1", "forward", None): UNKNOWN})) as dest:
        config, saga = await _blocked_unknown(db, dest.base_url)
        paths = (f"/sagas/{saga}", "/blocked")
        async with console_running(with_console(config, tokens=TOKENS), db) as base:
            by_read_token = await _pages(base, READ_TOKEN, *paths)
            by_write_token = await _pages(base, WRITE_TOKEN, *paths)
        async with console_running(with_console(config), db, environ={}) as base:
            tokenless = await _pages(base, None, *paths)
    for page in by_read_token + tokenless:
        assert 'class="action"' not in page and "not act" in page
    assert all("'dashboard' may read, not act" in html.unescape(p) for p in by_read_token)
    assert all("loopback_actions = true" in p for p in tokenless)
    for page in by_write_token:
        assert 'data-action="resolve"' in page and "not act" not in page


async def test_the_result_placeholder_comes_from_the_steps_verb(db: str) -> None:
    with running(answer({("s1", "forward", None): UNKNOWN})) as dest:
        config, saga = await _blocked_unknown(db, dest.base_url)
        schema = make_config(dest.base_url, {"pay": {"result_schema": CHARGE_SCHEMA}, "ship": {}})
        consoles = [config, schema]
        pages = []
        for each in consoles:
            async with console_running(with_console(each, tokens=TOKENS), db) as base:
                pages += await _pages(base, WRITE_TOKEN, f"/sagas/{saga}")
    plain, shaped = (step_card(page, "s1") for page in pages)
    assert 'placeholder="what s1 returned, as JSON (optional)"' in plain
    assert 'placeholder="{"charge": "…", "cents": 0} (optional)"' in shaped
    assert "c-1" not in plain + shaped


def offered(page: str, action: str) -> list[str]:
    """The choices of each form of ``action`` on the page (its decisions, for Resolve)."""
    forms = re.findall(rf'<form [^>]*data-action="{action}">(.*?)</form>', page, re.S)
    return [
        html.unescape(v) for form in forms for v in re.findall(r'<option value="([^"]*)"', form)
    ]


def saga_actions(page: str) -> list[str]:
    """The forms on the page, in order, by action."""
    return re.findall(r'<form [^>]*data-action="([a-z-]+)"', page)


async def _blocked_compensation(db: str, base_url: str) -> tuple[Any, str]:
    config = make_config(base_url, {"do": {}, "undo": {}})
    plan = serial_plan("comp", ["do", "do"], compensate={"s1": "undo"})
    saga = client_for(config, db).submit(plan, execution_id="b-1").saga_id
    await run_until_idle(config, db)
    assert saga_row(db, saga)["state"] == "blocked_compensation"
    return config, saga


async def test_resolve_of_a_failed_compensation_offers_only_what_resolve_accepts(
    db: str,
) -> None:
    rules = {("s2", "forward", None): PERMANENT, ("s1", "compensation", None): PERMANENT}
    with running(answer(rules)) as dest:
        config, saga = await _blocked_compensation(db, dest.base_url)
        async with console_running(with_console(config, tokens=TOKENS), db) as base:
            async with httpx.AsyncClient(base_url=base) as http:
                await login(http, WRITE_TOKEN)
                pages = [(await http.get(path)).text for path in (f"/sagas/{saga}", "/blocked")]
                fields = {
                    "effect_id": "s1",
                    "direction": "compensation",
                    "decision": offered(pages[0], "resolve")[0],
                    "evidence": "refunded by hand",
                    "csrf": csrf_of(pages[0]),
                }
                done = await http.post(
                    f"/sagas/{saga}/resolve", data=fields, headers={"Origin": base}
                )
    for page in pages:
        assert offered(page, "resolve") == ["committed", "not_committed_retry"]
        assert sorted(saga_actions(page)) == ["resolve", "retry"]
    assert done.status_code == 303, done.text
    assert saga_row(db, saga)["state"] == "compensated"


async def test_the_blocked_page_names_a_refusals_status_once(db: str) -> None:
    rules = {("s2", "forward", None): PERMANENT, ("s1", "compensation", None): PERMANENT}
    with running(answer(rules)) as dest:
        config, _ = await _blocked_compensation(db, dest.base_url)
        async with console_running(with_console(config, tokens=TOKENS), db) as base:
            [page] = await _pages(base, READ_TOKEN, "/blocked")
    text = html.unescape(page)
    assert "#1 permanent_failure HTTP 422: no" in text
    assert "HTTP 422: HTTP 422" not in text


async def test_a_blocked_contract_saga_offers_the_action_its_config_allows(db: str) -> None:
    with running() as dest:
        config = make_config(dest.base_url, {"work": {}})
        saga = client_for(config, db).submit(serial_plan("drift", ["work"]), execution_id="c-1")
        drifted = make_config(dest.base_url, {"work": {"version": 2}})
        await run_until_idle(drifted, db)
        assert saga_row(db, saga.saga_id)["state"] == "blocked_contract"
        blocked_view = client_for(config, db).get(saga.saga_id)
        assert blocked_view is not None
        pages = {}
        for name, each in (("restored", config), ("drifted", drifted)):
            async with console_running(with_console(each, tokens=TOKENS), db) as base:
                paths = (f"/sagas/{saga.saga_id}", "/blocked")
                pages[name] = await _pages(base, WRITE_TOKEN, *paths)
        async with console_running(with_console(drifted, tokens=TOKENS), db) as base:
            async with httpx.AsyncClient(base_url=base) as http:
                await login(http, WRITE_TOKEN)
                page = (await http.get(f"/sagas/{saga.saga_id}")).text
                fields = {"evidence": "version 2 is meant", "csrf": csrf_of(page)}
                adopted = await http.post(
                    f"/sagas/{saga.saga_id}/adopt-contract", data=fields, headers={"Origin": base}
                )
    assert [saga_actions(page) for page in pages["drifted"]] == [["adopt-contract"]] * 2
    # the CLI, which does not read the loaded config here, lists the usual fit first
    assert [a.split()[1] for a in blocked_view.next_actions] == ["adopt-contract", "retry"]
    assert [saga_actions(page) for page in pages["restored"]] == [["retry"]] * 2
    assert adopted.status_code == 303, adopted.text


async def test_the_saga_page_shows_a_refusing_destination_as_waiting_and_attempts_not_sent(
    db: str,
) -> None:
    with running() as dest:
        fast = {"initial_backoff": "20ms", "max_backoff": "50ms"}
        config = make_config(dest.base_url, {"pay": {"retry": fast}})
        go_down(dest)  # connections refused: nothing is ever sent
        saga = client_for(config, db).submit(serial_plan("w", ["pay"]), execution_id="w-1").saga_id
        async with daemon_running(config, db):
            await wait_for(lambda: len(attempts_of(db, saga, "s1")) >= 3)
        # the daemon drained: the dispatch waits for its next try
        async with console_running(with_console(config, tokens=TOKENS), db) as base:
            [page] = await _pages(base, READ_TOKEN, f"/sagas/{saga}")
    s1 = step_card(page, "s1")
    assert "waiting for destination dest since" in s1 and "gives up at" in s1
    assert "not sent" in s1
    assert "0 of 5" in s1  # no request was written: claims that ended unsent are none

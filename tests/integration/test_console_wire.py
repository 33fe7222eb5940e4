"""The console's answers to what a browser or a script may really send, over the wire: a
chunked body, bad numbers, deep JSON, text no store keeps, other apps' cookies; and whose
session is whose."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode, urlsplit

import httpx
import pytest

from tests.integration.test_console_api import _blocked_unknown, snapshot
from tests.integration.test_operator import UNKNOWN, answer, events, saga_row
from tests.support.console import (
    READ_TOKEN,
    TOKENS,
    WRITE_TOKEN,
    bearer,
    console_running,
    csrf_of,
    login,
    with_console,
)
from tests.support.destination import running
from tests.support.harness import client_for, make_config, serial_plan
from tests.support.wire import chunked, exchange, json_of, status_of, tracebacks

pytestmark = pytest.mark.postgres

PRIVATE = "private-value-4411"
FORM_ESCAPES = {"\x00": "%00", "\ud800": "%ED%A0%80"}


def _port(base: str) -> int:
    port = urlsplit(base).port
    assert port is not None
    return port


async def _resolve_raw(base: str, saga: str, body: bytes) -> bytes:
    """POST ``body`` as it is to the API's resolve, with the write token."""
    return await exchange(
        _port(base),
        f"POST /api/sagas/{saga}/resolve HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {WRITE_TOKEN}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body,
    )


async def test_a_chunked_action_body_is_read_so_the_operator_and_evidence_are_recorded(
    db: str,
) -> None:
    with running() as dest:
        config = make_config(dest.base_url, {"pay": {}})
        later = datetime.now(UTC) + timedelta(hours=1)
        client = client_for(config, db)
        saga = client.submit(serial_plan("c", ["pay"]), execution_id="k-1", not_before=later)
        fields = {"evidence": "the customer asked", "actor": "alice"}
        async with console_running(with_console(config, tokens=TOKENS), db) as base:
            answer_ = await exchange(
                _port(base),
                f"POST /api/sagas/{saga.saga_id}/cancel HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Authorization: Bearer {WRITE_TOKEN}\r\nContent-Type: application/json\r\n"
                "Transfer-Encoding: chunked\r\n\r\n".encode()
                + chunked(json.dumps(fields).encode()),
            )
    assert status_of(answer_) == 200, answer_
    [canceled] = events(db, saga.saga_id, "operator_cancel")
    assert canceled["actor"] == "console:oncall/alice"
    assert canceled["evidence"] == "the customer asked"


async def test_a_query_number_that_is_not_ascii_digits_is_400_naming_the_parameter(
    db: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config("http://127.0.0.1:9", {"pay": {}})
    async with console_running(with_console(config, tokens=TOKENS), db) as base:
        async with httpx.AsyncClient(base_url=base, headers=bearer(READ_TOKEN)) as http:
            answers = [await http.get(p) for p in ("/api/sagas?limit=²", "/api/blocked?limit=²")]
            answers.append(await http.get("/api/sagas?plan_id=%00"))
            await login(http, READ_TOKEN)
            page = await http.get("/sagas?limit=²")
    assert [a.status_code for a in answers] == [400, 400, 400]
    assert answers[0].json()["error"].startswith("limit:")
    assert answers[2].json()["error"].startswith("plan_id:")
    assert page.status_code == 400 and "limit:" in page.text
    assert tracebacks(caplog) == []


async def test_json_nested_32000_deep_is_refused_and_changes_nothing(
    db: str, caplog: pytest.LogCaptureFixture
) -> None:
    with running(answer({("s1", "forward", None): UNKNOWN})) as dest:
        config, saga = await _blocked_unknown(db, dest.base_url)
        before = snapshot(db, saga)
        deep = b'{"effect_id": "s1", "decision": "committed", "evidence": "e", "result": '
        deep += b"[" * 32_000 + b"]" * 32_000 + b"}"
        async with console_running(with_console(config, tokens=TOKENS), db) as base:
            answer_ = await _resolve_raw(base, saga, deep)
    assert status_of(answer_) == 422, answer_[:300]
    assert "nests deeper" in json_of(answer_)["error"]  # type: ignore[index]
    assert snapshot(db, saga) == before
    assert tracebacks(caplog) == []


@pytest.mark.parametrize("field", ["evidence", "actor"])
@pytest.mark.parametrize("bad", ["\x00", "\ud800"], ids=["nul", "lone-surrogate"])
async def test_unstorable_text_in_evidence_or_actor_is_422_naming_the_field_and_writes_nothing(
    store_url: str, field: str, bad: str, caplog: pytest.LogCaptureFixture
) -> None:
    """On either store: SQLite would keep a NUL that PostgreSQL refuses mid-transaction."""
    with running(answer({("s1", "forward", None): UNKNOWN})) as dest:
        config, saga = await _blocked_unknown(store_url, dest.base_url)
        before = snapshot(store_url, saga)
        fields = {"effect_id": "s1", "decision": "committed", "evidence": "ledger", "actor": "a"}
        fields[field] = f"{PRIVATE}{bad}"
        body = json.dumps(fields).encode()  # "\u0000" and "\ud800" as JSON escapes
        async with console_running(with_console(config, tokens=TOKENS), store_url) as base:
            api = await _resolve_raw(base, saga, body)
            async with httpx.AsyncClient(base_url=base) as http:
                await login(http, WRITE_TOKEN)
                csrf = csrf_of((await http.get(f"/sagas/{saga}")).text)
                # what a form can carry: NUL as %00, a surrogate only as bytes not UTF-8
                encoded = {**fields, field: PRIVATE, "direction": "forward", "csrf": csrf}
                raw = urlencode(encoded).replace(PRIVATE, PRIVATE + FORM_ESCAPES[bad])
                form = await http.post(
                    f"/sagas/{saga}/resolve",
                    content=raw.encode(),
                    headers={"Origin": base, "Content-Type": "application/x-www-form-urlencoded"},
                )
    assert status_of(api) == 422, api
    error = json_of(api)["error"]  # type: ignore[index]
    assert error.startswith(f"{field}:") and PRIVATE not in error
    assert form.status_code == 422, form.text
    assert (f"{field}:" if bad == "\x00" else "not UTF-8") in form.text
    assert PRIVATE not in form.text
    assert snapshot(store_url, saga) == before
    assert tracebacks(caplog) == []


async def test_another_local_apps_cookie_neither_loops_sign_in_nor_stales_forms(db: str) -> None:
    """Another app on 127.0.0.1 may set a cookie Python's SimpleCookie cannot parse; the
    browser sends it to the console too."""
    with running(answer({("s1", "forward", None): UNKNOWN})) as dest:
        config, saga = await _blocked_unknown(db, dest.base_url)
        async with console_running(with_console(config, tokens=TOKENS), db) as base:
            async with httpx.AsyncClient(base_url=base) as http:
                http.cookies.set("prefs", '{"theme":"dark"}', domain="127.0.0.1")
                await login(http, WRITE_TOKEN)
                signed_in = await http.get("/blocked")
        tokenless = with_console(config, loopback_actions=True)
        async with console_running(tokenless, db, environ={}) as base:
            async with httpx.AsyncClient(base_url=base) as http:
                http.cookies.set("prefs", '{"theme":"dark"}', domain="127.0.0.1")
                csrf = csrf_of((await http.get(f"/sagas/{saga}")).text)
                fields = {"effect_id": "s1", "direction": "forward", "decision": "committed"}
                acted = await http.post(
                    f"/sagas/{saga}/resolve",
                    data={**fields, "evidence": "seen it", "csrf": csrf},
                    headers={"Origin": base},
                )
    assert signed_in.status_code == 200 and "Blocked" in signed_in.text
    assert acted.status_code == 303, acted.text
    assert saga_row(db, saga)["state"] != "blocked_unknown"


async def test_two_consoles_on_one_host_keep_their_own_sessions(db: str) -> None:
    """A browser sends 127.0.0.1's cookies to every port: each console names its own."""
    config = with_console(make_config("http://127.0.0.1:9", {"pay": {}}), tokens=TOKENS)
    async with console_running(config, db) as first, console_running(config, db) as second:
        async with httpx.AsyncClient() as browser:  # one cookie jar, as a browser has
            for base in (first, second):
                signed_in = await browser.post(
                    f"{base}/login", data={"token": WRITE_TOKEN}, headers={"Origin": base}
                )
                assert signed_in.status_code == 303
            pages = [await browser.get(f"{base}/blocked") for base in (first, second)]
            names = sorted(browser.cookies.keys())
    assert [p.status_code for p in pages] == [200, 200]
    assert names == sorted(f"effectusd_console_{_port(base)}" for base in (first, second))


async def test_the_tokenless_console_opens_no_session_and_its_forms_need_no_cookie(
    db: str,
) -> None:
    with running(answer({("s1", "forward", None): UNKNOWN})) as dest:
        config, saga = await _blocked_unknown(db, dest.base_url)
        tokenless = with_console(config, loopback_actions=True)
        async with console_running(tokenless, db, environ={}) as base:
            async with httpx.AsyncClient(base_url=base) as http:
                pages = [await http.get(path) for path in ("/", "/blocked", f"/sagas/{saga}")]
                csrf = csrf_of(pages[2].text)
            async with httpx.AsyncClient(base_url=base) as http:  # a fresh browser, no cookie
                fields = {"effect_id": "s1", "direction": "forward", "decision": "committed"}
                acted = await http.post(
                    f"/sagas/{saga}/resolve",
                    data={**fields, "evidence": "seen it", "csrf": csrf, "actor": "bob"},
                    headers={"Origin": base},
                )
    assert [p.status_code for p in pages] == [200, 200, 200]
    assert all("set-cookie" not in p.headers for p in pages)
    assert acted.status_code == 303, acted.text
    [resolved] = events(db, saga, "operator_resolve")
    assert resolved["actor"] == "console:loopback/bob"


async def test_evidence_typed_on_several_lines_in_the_form_is_kept_as_one_line(db: str) -> None:
    """The form's text box lets an operator press Enter; the API still refuses a newline
    (the operator layer's rule), the form folds the lines into one."""
    with running(answer({("s1", "forward", None): UNKNOWN})) as dest:
        config, saga = await _blocked_unknown(db, dest.base_url)
        tokenless = with_console(config, loopback_actions=True)
        async with console_running(tokenless, db, environ={}) as base:
            async with httpx.AsyncClient(base_url=base) as http:
                csrf = csrf_of((await http.get(f"/sagas/{saga}")).text)
                fields = {"effect_id": "s1", "direction": "forward", "decision": "committed"}
                acted = await http.post(
                    f"/sagas/{saga}/resolve",
                    data={**fields, "evidence": "ledger row 7\r\n\tcharge c-1  ", "csrf": csrf},
                    headers={"Origin": base},
                )
    assert acted.status_code == 303, acted.text
    [resolved] = events(db, saga, "operator_resolve")
    assert resolved["evidence"] == "ledger row 7 charge c-1"


async def test_a_read_only_console_says_why_in_its_own_words(db: str) -> None:
    with running(answer({("s1", "forward", None): UNKNOWN})) as dest:
        config, saga = await _blocked_unknown(db, dest.base_url)
        resolve: dict[str, Any] = {"effect_id": "s1", "decision": "committed", "evidence": "e"}
        async with console_running(with_console(config), db, environ={}) as base:
            async with httpx.AsyncClient(base_url=base) as http:
                tokenless = await http.post(f"/api/sagas/{saga}/resolve", json=resolve)
        async with console_running(with_console(config, tokens=TOKENS), db) as base:
            async with httpx.AsyncClient(base_url=base, headers=bearer(WRITE_TOKEN)) as http:
                bare = {k: v for k, v in resolve.items() if k != "evidence"}
                no_evidence = await http.post(f"/api/sagas/{saga}/resolve", json=bare)
                bad_result = await http.post(
                    f"/api/sagas/{saga}/resolve", json={**resolve, "result_json": "{oops"}
                )
    assert tokenless.status_code == 403
    assert "loopback_actions" in tokenless.json()["error"]
    assert "scope" not in tokenless.json()["error"]
    for refused in (no_evidence, bad_result):
        assert refused.status_code == 422 and "--" not in refused.json()["error"]
    assert no_evidence.json()["error"].startswith("evidence:")
    assert bad_result.json()["error"].startswith("result:")


async def test_an_actor_with_a_zero_width_space_is_422_naming_the_field_and_writes_nothing(
    db: str,
) -> None:
    with running(answer({("s1", "forward", None): UNKNOWN})) as dest:
        config, saga = await _blocked_unknown(db, dest.base_url)
        before = snapshot(db, saga)
        fields = {"effect_id": "s1", "decision": "committed", "evidence": "ledger"}
        async with console_running(with_console(config, tokens=TOKENS), db) as base:
            async with httpx.AsyncClient(base_url=base, headers=bearer(WRITE_TOKEN)) as http:
                refused = await http.post(
                    f"/api/sagas/{saga}/resolve", json={**fields, "actor": "al\u200bice"}
                )
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"].startswith("actor holds U+200B")
    assert snapshot(db, saga) == before

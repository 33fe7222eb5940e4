"""The admin API against a real store, daemon and destination: auth and CSRF refusals change
nothing, each action does to a saga what the same CLI command does to its twin, and lists
never carry a saga's values."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from effectusd.config import ConfigError
from effectusd.console import Console
from effectusd.store.sql import store_backend
from tests.integration.test_operator import (
    STALE,
    UNKNOWN,
    answer,
    cli_json,
    config_file,
    events,
    saga_row,
)
from tests.support.console import (
    READ_TOKEN,
    TOKEN_ENV,
    TOKENS,
    WRITE_TOKEN,
    bearer,
    console_running,
    csrf_of,
    daemon_with_console,
    login,
    with_console,
)
from tests.support.destination import running
from tests.support.harness import (
    client_for,
    fetch,
    make_config,
    run_until_idle,
    serial_plan,
)

pytestmark = pytest.mark.postgres

SECRET_FACT = "fact-value-7781"
SECRET_RESULT = "result-value-9912"


def snapshot(url: str, saga: str) -> dict[str, Any]:
    """Everything an action could change about one saga."""
    return {
        "saga": fetch(url, "SELECT * FROM effectus_saga_instances WHERE saga_id = %s", saga),
        "steps": fetch(
            url, "SELECT * FROM effectus_saga_steps WHERE saga_id = %s ORDER BY sequence", saga
        ),
        "outbox": fetch(
            url, "SELECT * FROM effectus_saga_outbox WHERE saga_id = %s ORDER BY dispatch_id", saga
        ),
        "events": fetch(url, "SELECT event_id FROM effectus_saga_events WHERE saga_id = %s", saga),
    }


# -- security ------------------------------------------------------------------------------


def test_a_console_beyond_loopback_needs_a_token_and_errors_name_keys_not_values(
    tmp_path: Path,
) -> None:
    config = make_config("http://127.0.0.1:9", {"do": {}})
    backend = store_backend(f"sqlite:///{tmp_path / 'x.db'}")
    with pytest.raises(ConfigError, match=r"console\.tokens: .*0\.0\.0\.0.*not loopback"):
        Console(with_console(config), backend, "0.0.0.0", environ={})
    Console(with_console(config), backend, "127.0.0.1", environ={})  # loopback: fine

    tokens = with_console(config, tokens=TOKENS)
    with pytest.raises(ConfigError, match=r"console\.tokens\.oncall\.env: .*CONSOLE_WRITE"):
        Console(tokens, backend, "0.0.0.0", environ={"CONSOLE_READ": READ_TOKEN})
    short = {"CONSOLE_WRITE": "short-secret", "CONSOLE_READ": READ_TOKEN}
    with pytest.raises(ConfigError) as refused:
        Console(tokens, backend, "0.0.0.0", environ=short)
    assert "console.tokens.oncall.env" in str(refused.value)
    assert "short-secret" not in str(refused.value)


async def _blocked_unknown(db: str, dest_url: str) -> tuple[Any, str]:
    config = make_config(dest_url, {"pay": {}, "ship": {}})
    plan = {
        "plan_id": "console",
        "facts": {"n": "string"},
        "steps": [
            {"id": "s1", "verb": "pay", "args": {"n": {"$fact": "n"}}, "compensate": "none"},
            {"id": "s2", "verb": "ship", "args": {"n": 2}, "compensate": "none"},
        ],
    }
    saga = client_for(config, db).submit(plan, execution_id="c-1", facts={"n": SECRET_FACT})
    await run_until_idle(config, db)
    assert saga_row(db, saga.saga_id)["state"] == "blocked_unknown"
    return config, saga.saga_id


async def test_no_token_is_401_a_read_token_cannot_act_and_refusals_change_nothing(
    db: str,
) -> None:
    with running(answer({("s1", "forward", None): UNKNOWN})) as dest:
        config, saga = await _blocked_unknown(db, dest.base_url)
        before = snapshot(db, saga)
        resolve = {"effect_id": "s1", "decision": "committed", "evidence": "seen it"}
        console = with_console(config, tokens=TOKENS)
        async with console_running(console, db, host="0.0.0.0") as base:
            async with httpx.AsyncClient(base_url=base) as http:
                assert (await http.get("/api/sagas")).status_code == 401
                assert (
                    await http.get("/api/sagas", headers=bearer("wrong" * 5))
                ).status_code == 401
                listed = await http.get("/api/sagas", headers=bearer(READ_TOKEN))
                assert [r["saga_id"] for r in listed.json()["sagas"]] == [saga]
                url = f"/api/sagas/{saga}/resolve"
                assert (await http.post(url, json=resolve)).status_code == 401
                read_only = await http.post(url, json=resolve, headers=bearer(READ_TOKEN))
                assert read_only.status_code == 403
                assert READ_TOKEN not in read_only.text
                # pages: no session, no page; a form without its CSRF token is refused
                assert (await http.get("/blocked")).status_code == 303
                await login(http, WRITE_TOKEN)
                page = await http.get("/blocked")
                assert page.status_code == 200 and csrf_of(page.text)
                origin = {"Origin": base}
                form = {**resolve, "direction": "forward"}
                no_csrf = await http.post(f"/sagas/{saga}/resolve", data=form, headers=origin)
                assert no_csrf.status_code == 403
                elsewhere = {"Origin": "http://evil.example"}
                wrong_origin = await http.post(
                    f"/sagas/{saga}/resolve",
                    data={**form, "csrf": csrf_of(page.text)},
                    headers=elsewhere,
                )
                assert wrong_origin.status_code == 403
                # refused by the state and by missing evidence: the guarded action writes nothing
                retry = await http.post(
                    f"/api/sagas/{saga}/retry", json={}, headers=bearer(WRITE_TOKEN)
                )
                assert (retry.status_code, retry.json()["refused"]) == (409, "conflict")
                bare = {k: v for k, v in resolve.items() if k != "evidence"}
                no_evidence = await http.post(url, json=bare, headers=bearer(WRITE_TOKEN))
                assert (no_evidence.status_code, no_evidence.json()["refused"]) == (422, "invalid")
        assert snapshot(db, saga) == before


async def test_loopback_without_tokens_reads_and_acts_only_when_allowed(db: str) -> None:
    with running(answer({("s1", "forward", None): UNKNOWN})) as dest:
        config, saga = await _blocked_unknown(db, dest.base_url)
        before = snapshot(db, saga)
        resolve = {"effect_id": "s1", "decision": "committed", "evidence": "seen it"}
        async with console_running(with_console(config), db, environ={}) as base:
            async with httpx.AsyncClient(base_url=base) as http:
                assert (await http.get(f"/api/sagas/{saga}")).status_code == 200
                refused = await http.post(f"/api/sagas/{saga}/resolve", json=resolve)
                assert refused.status_code == 403
                rebound = await http.get("/api/sagas", headers={"Host": "evil.example"})
                assert rebound.status_code == 421  # a DNS-rebound page cannot read it
            assert snapshot(db, saga) == before
        allowed = with_console(config, loopback_actions=True)
        async with console_running(allowed, db, environ={}) as base:
            async with httpx.AsyncClient(base_url=base) as http:
                as_text = await http.post(
                    f"/api/sagas/{saga}/resolve",
                    content=json.dumps(resolve),
                    headers={"Content-Type": "text/plain"},
                )
                assert as_text.status_code == 415  # what a cross-site form could send
                done = await http.post(
                    f"/api/sagas/{saga}/resolve", json={**resolve, "actor": "bob"}
                )
                assert done.status_code == 200, done.text
        [resolved] = events(db, saga, "operator_resolve")
        assert resolved["actor"] == "console:loopback/bob"


# -- each action as the CLI does it ----------------------------------------------------------


def _normal(value: Any, saga: str, actor: str) -> Any:
    """A report or rows with what differs between twins (ids, keys, actor, times) taken out."""
    # fencing grants: the twins share a resource, so the second holds the next token
    dropped = {"saga_id", "idempotency_key", "key", "event_id", "dispatch_id", "request_id"}
    dropped |= {"grants", "lease_token"}
    if isinstance(value, dict):
        return {
            k: _normal(v, saga, actor)
            for k, v in value.items()
            if k not in dropped and not k.endswith(("_at", "_since")) and k != "execution_id"
        }
    if isinstance(value, list):
        return [_normal(v, saga, actor) for v in value]
    if isinstance(value, str):
        return value.replace(saga, "SAGA").replace(actor, "ACTOR")
    return value


def _state_of(db: str, saga: str, actor: str) -> Any:
    rows = snapshot(db, saga)
    rows["events"] = [
        (e["kind"], e["effect_id"], e["from_state"], e["to_state"], e["evidence"])
        for e in fetch(
            db, "SELECT * FROM effectus_saga_events WHERE saga_id = %s ORDER BY event_id", saga
        )
    ]
    for row in rows["saga"]:
        row.pop("facts_hash", None)
    return _normal(rows, saga, actor)


Scenario = Callable[[str, str], Any]
FENCED = {"pay": {"fencing": ["account:{args.n}"]}}
LATER = datetime.now(UTC) + timedelta(hours=1)


@pytest.mark.parametrize(
    ("action", "fields", "rules", "verbs", "drift", "not_before"),
    [
        ("resolve", {"effect_id": "s1", "decision": "committed", "result": {"c": 1}},
         {("s1", "forward", None): UNKNOWN}, {"pay": {}}, False, None),
        ("resolve", {"effect_id": "s1", "decision": "not_committed_retry"},
         {("s1", "forward", 1): UNKNOWN}, {"pay": {}}, False, None),
        ("resolve", {"effect_id": "s1", "decision": "not_committed_fail"},
         {("s1", "forward", None): UNKNOWN}, {"pay": {}}, False, None),
        ("retry", {}, {("s1", "forward", 1): STALE}, FENCED, False, None),
        ("cancel", {}, {}, {"pay": {}}, False, LATER),
        ("adopt-contract", {}, {}, {"pay": {}}, True, None),
    ],
    ids=["resolve-committed", "resolve-retry", "resolve-fail", "retry", "cancel", "adopt"],
)  # fmt: skip
async def test_each_action_changes_the_saga_as_the_cli_does_its_twin(
    db: str,
    tmp_path: Path,
    action: str,
    fields: dict[str, Any],
    rules: dict[Any, Any],
    verbs: dict[str, Any],
    drift: bool,
    not_before: datetime | None,
) -> None:
    with running(answer(rules)) as dest:
        config = make_config(dest.base_url, verbs)
        live = make_config(dest.base_url, {"pay": {"version": 2}}) if drift else config
        client = client_for(config, db)
        plan = serial_plan("twins", ["pay"])
        twins = []
        for name in ("by-cli", "by-api"):  # one after the other: they share a fence
            twins.append(client.submit(plan, execution_id=name, not_before=not_before).saga_id)
            if not_before is None:
                await run_until_idle(live, db)
        states = {saga_row(db, saga)["state"] for saga in twins}
        assert len(states) == 1
        evidence = "checked the ledger"
        flags = _cli_flags(action, fields)
        by_cli = cli_json(
            config_file(tmp_path, live),
            db,
            *(action, twins[0], *flags, "--evidence", evidence, "--actor", "ACTOR"),
        )
        async with console_running(with_console(live, tokens=TOKENS), db) as base:
            async with httpx.AsyncClient(base_url=base, headers=bearer(WRITE_TOKEN)) as http:
                response = await http.post(
                    f"/api/sagas/{twins[1]}/{action}", json={**fields, "evidence": evidence}
                )
        assert response.status_code == 200, response.text
        by_api = response.json()
        assert by_api["actor"] == "console:oncall"
        assert _normal(by_api, twins[1], "console:oncall") == _normal(by_cli, twins[0], "ACTOR")
        assert _state_of(db, twins[1], "console:oncall") == _state_of(db, twins[0], "ACTOR")
        await run_until_idle(live, db)
        assert saga_row(db, twins[1])["state"] == saga_row(db, twins[0])["state"]


def _cli_flags(action: str, fields: dict[str, Any]) -> list[str]:
    if action != "resolve":
        return []
    flags = [fields["effect_id"]]
    flags += {
        "committed": ["--committed"],
        "not_committed_retry": ["--not-committed", "--retry"],
        "not_committed_fail": ["--not-committed", "--fail"],
    }[fields["decision"]]
    if "result" in fields:
        flags += ["--result", json.dumps(fields["result"])]
    return flags


# -- values stay out of lists ------------------------------------------------------------------


async def test_lists_never_contain_argument_values_and_the_detail_does(db: str) -> None:
    def handler(request: Any) -> Any:
        if request.effect == "s1":
            from tests.support.destination import Response

            return Response(200, {"echo": SECRET_RESULT})
        return UNKNOWN

    with running(handler) as dest:
        config = make_config(dest.base_url, {"pay": {"fencing": ["acct:{args.n}"]}})
        plan = {
            "plan_id": "values",
            "facts": {"n": "string"},
            "steps": [
                {"id": f"s{i}", "verb": "pay", "args": {"n": {"$fact": "n"}}, "compensate": "none"}
                for i in (1, 2)
            ],
        }
        client = client_for(config, db)
        saga = client.submit(plan, execution_id="v-1", facts={"n": SECRET_FACT}).saga_id
        await run_until_idle(config, db)
        assert saga_row(db, saga)["state"] == "blocked_unknown"
        async with console_running(with_console(config, tokens=TOKENS), db) as base:
            async with httpx.AsyncClient(base_url=base, headers=bearer(READ_TOKEN)) as http:
                listed = (await http.get("/api/sagas")).text
                blocked = (await http.get("/api/blocked")).json()
                detail = (await http.get(f"/api/sagas/{saga}")).text
                await login(http, READ_TOKEN)
                pages = [(await http.get(path)).text for path in ("/", "/blocked", "/sagas")]
                detail_page = (await http.get(f"/sagas/{saga}")).text
    assert [b["saga_id"] for b in blocked["blocked"]] == [saga]
    [blocking] = blocked["blocked"][0]["blocking"]
    assert (blocking["effect_id"], blocking["state"]) == ("s2", "blocked_unknown")
    assert blocking["attempts"][0]["status_code"] == 503  # the evidence is there
    for text in [listed, json.dumps(blocked), *pages]:
        assert SECRET_FACT not in text and SECRET_RESULT not in text
    for text in (detail, detail_page):
        assert SECRET_FACT in text and SECRET_RESULT in text


# -- on the daemon's port -----------------------------------------------------------------------


async def test_the_daemon_serves_the_console_beside_unchanged_metrics_and_health(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in TOKEN_ENV.items():
        monkeypatch.setenv(name, value)
    with running() as dest:
        config = make_config(dest.base_url, {"pay": {}}, observability={"http_port": 0})
        config = with_console(config, tokens=TOKENS)
        client = client_for(config, db)
        saga = client.submit(serial_plan("daemon", ["pay"]), execution_id="d-1").saga_id
        async with daemon_with_console(config, db) as daemon:
            async with asyncio.timeout(30):
                while getattr(client.get(saga), "state", None) != "completed":
                    await asyncio.sleep(0.05)
            assert daemon.http_port is not None
            base = f"http://127.0.0.1:{daemon.http_port}"
            async with httpx.AsyncClient(base_url=base) as http:
                health = await http.get("/healthz")
                metrics = await http.get("/metrics")
                posted = await http.post("/metrics")
                anonymous = await http.get("/api/overview")
                overview = await http.get("/api/overview", headers=bearer(READ_TOKEN))
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert metrics.status_code == 200 and "effectusd_outcomes_total" in metrics.text
    assert posted.status_code == 405  # the observability routes stay GET only
    assert anonymous.status_code == 401
    data = overview.json()
    assert data["finished_last_hour"] == {"completed": 1}
    assert data["attempt_outcomes_since_start"] == {"success": 1}
    assert data["ready_queue_depth"] == 0

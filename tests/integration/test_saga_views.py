"""What `sagas show` and `sagas list` tell an operator."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import psycopg
import pytest
from click.testing import CliRunner

from effectusd.cli import main
from effectusd.destination import PermanentFailure
from tests.support.console import READ_TOKEN, TOKENS, console_running, login, with_console
from tests.support.destination import Request, Response, running
from tests.support.harness import client_for, make_config, run_until_idle, serial_plan

pytestmark = pytest.mark.postgres


def published(name: str) -> dict[str, object]:
    schema: dict[str, object] = json.loads(
        (Path(__file__).resolve().parents[2] / "docs" / "schema" / name).read_text()
    )
    return schema


def unknown(request: Request) -> Response:
    return Response(503, {"error": "upstream"})


async def test_show_of_a_blocked_saga_gives_the_evidence_and_the_commands(db: str) -> None:
    with running(unknown) as dest:
        config = make_config(dest.base_url, {"pay": {"fencing": ["acct:{args.n}"]}})
        client = client_for(config, db)
        saga = client.submit(serial_plan("v", ["pay"]), execution_id="v-1").saga_id
        await run_until_idle(config, db)
    cli = ["--database-url", db, "sagas", "show", saga]
    text = CliRunner().invoke(main, cli).output
    view = json.loads(CliRunner().invoke(main, [*cli, "--json"]).output)
    listed = json.loads(CliRunner().invoke(main, [*cli[:3], "list", "--json"]).output)

    jsonschema.validate(view, published("saga.json"))  # the schema docs/schema/ publishes
    jsonschema.validate(listed, published("saga-list.json"))
    assert [row["saga_id"] for row in listed] == [saga]
    dispatch = view["steps"][0]["dispatches"][0]
    assert view["state"] == "blocked_unknown"
    assert dispatch["idempotency_key"] in text and dispatch["args_hash"] in text
    assert "attempt 1  sent 20" in text and "http 503" in text and "acct:1" in text
    assert f"effectusd resolve {saga} s1 --committed" in text
    assert view["next_actions"] == [
        f"effectusd resolve {saga} s1 --committed [--result JSON] --evidence 'WHAT YOU CHECKED'",
        f"effectusd resolve {saga} s1 --not-committed --retry --evidence 'WHAT YOU CHECKED'",
        f"effectusd resolve {saga} s1 --not-committed --fail --evidence 'WHAT YOU CHECKED'",
    ]


def out_of_stock(request: Request) -> Response:
    """The kit's own answer to a mutation that raised PermanentFailure."""
    reply = PermanentFailure("out of stock", status=409).reply(acknowledged=False)
    return Response(reply.status, json.loads(reply.body), reply.headers)


async def test_a_refusal_shows_the_destinations_reason_after_its_status(db: str) -> None:
    with running(out_of_stock) as dest:
        config = make_config(dest.base_url, {"pay": {}})
        client = client_for(config, db)
        saga = client.submit(serial_plan("v", ["pay"]), execution_id="v-1").saga_id
        await run_until_idle(config, db)
        async with console_running(with_console(config, tokens=TOKENS), db) as base:
            async with httpx.AsyncClient(base_url=base) as http:
                await login(http, READ_TOKEN)
                page = html.unescape((await http.get(f"/sagas/{saga}")).text)
    cli = ["--database-url", db, "sagas", "show", saga]
    text = CliRunner().invoke(main, cli).output
    view = json.loads(CliRunner().invoke(main, [*cli, "--json"]).output)

    jsonschema.validate(view, published("saga.json"))
    assert view["state"] == "failed"
    assert view["stop_reason"] == "step 's1' failed: permanent failure: HTTP 409: out of stock"
    [attempt] = view["steps"][0]["dispatches"][0]["attempts"]
    assert attempt["error"] == "HTTP 409: out of stock"
    assert attempt["evidence"]["reason"] == "out of stock"
    assert "HTTP 409: out of stock" in text and view["stop_reason"] in text
    assert view["stop_reason"] in page and "HTTP 409: out of stock" in page


async def test_completed_saga_offers_nothing_to_do(db: str) -> None:
    with running() as dest:
        config = make_config(dest.base_url, {"pay": {}})
        client = client_for(config, db)
        saga = client.submit(serial_plan("done", ["pay"]), execution_id="d-1").saga_id
        await run_until_idle(config, db)
    view = client.get(saga)
    assert view is not None and view.state == "completed" and view.next_actions == []
    text = CliRunner().invoke(main, ["--database-url", db, "sagas", "show", saga]).output
    assert "what you can do" not in text and "why it stopped" not in text


def test_list_filters_by_age(db: str) -> None:
    config = make_config("http://127.0.0.1:9", {"pay": {}})
    client = client_for(config, db)
    old = client.submit(serial_plan("age", ["pay"]), execution_id="old").saga_id
    client.submit(serial_plan("age", ["pay"]), execution_id="new")
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "UPDATE effectus_saga_instances SET created_at = now() - interval '2 hours'"
            " WHERE saga_id = %s",
            (old,),
        )
    args = ["--database-url", db, "sagas", "list", "--json"]
    everything = json.loads(CliRunner().invoke(main, args).output)
    aged = json.loads(CliRunner().invoke(main, [*args, "--older-than", "1h"]).output)
    assert len(everything) == 2
    assert [row["saga_id"] for row in aged] == [old]
    bad = CliRunner().invoke(main, [*args, "--older-than", "soon"])
    assert bad.exit_code == 3 and "--older-than" in bad.output  # invalid input, as in config
    bare = CliRunner().invoke(main, [*args, "--older-than", "30"])  # 30 what?
    assert bare.exit_code == 3 and 'a duration needs a unit: write "30s" or "30ms"' in bare.output


def charged_then_refused(request: Request) -> Response:
    if request.effect == "s1":
        return Response(200, {"charge": "c-77"})
    return out_of_stock(request)


EVIDENCE_PLAN = {
    "plan_id": "evidence",
    "facts": {"n": "string", "note": "string"},
    "steps": [
        {
            "id": "s1",
            "verb": "pay",
            "args": {"n": {"$fact": "n"}, "note": {"$fact": "note"}},
            "compensate": "none",
        },
        {"id": "s2", "verb": "ship", "args": {"n": 2}, "compensate": "none"},
    ],
}
LONG_NOTE = "abc\u202edef\u0085" + "y" * 400


async def _shown(db: str, config: Any, saga: str) -> tuple[str, str]:
    """What `sagas show` prints and what the console's saga page shows (to a read token)."""
    text = CliRunner().invoke(main, ["--database-url", db, "sagas", "show", saga]).output
    async with console_running(with_console(config, tokens=TOKENS), db) as base:
        async with httpx.AsyncClient(base_url=base) as http:
            await login(http, READ_TOKEN)
            page = (await http.get(f"/sagas/{saga}")).text
    return text, html.unescape(re.sub(r"<[^>]+>", "", page))  # the page's text, without tags


async def test_show_gives_the_facts_the_arguments_as_sent_and_the_results(db: str) -> None:
    with running(charged_then_refused) as dest:
        config = make_config(dest.base_url, {"pay": {}, "ship": {}})
        facts = {"n": "n-5", "note": LONG_NOTE}
        saga = client_for(config, db).submit(EVIDENCE_PLAN, execution_id="e-1", facts=facts)
        await run_until_idle(config, db)
        text, page = await _shown(db, config, saga.saga_id)
    args = '{"n":"n-5","note":"abc\\u202edef\\u0085yyy'
    for shown in (text, page):
        assert '"n-5"' in shown  # the fact
        assert f"args (sha256 ok)  {args}" in shown or f"(sha256 ok): {args}" in shown
        assert '{"charge":"c-77"}' in shown  # s1's result
        assert "HTTP 409: out of stock" in shown  # the destination's reason on the attempt
        assert "characters; the whole: sagas show --json)" in shown
        assert "y" * 400 not in shown  # a long value is cut
        assert "\u202e" not in shown and "\u0085" not in shown
    assert "facts (the saga's input" in text and "result  {" in text


async def test_show_flags_arguments_whose_bytes_do_not_match_their_hash(db: str) -> None:
    with running(charged_then_refused) as dest:
        config = make_config(dest.base_url, {"pay": {}, "ship": {}})
        facts = {"n": "n-5", "note": "short"}
        saga = client_for(config, db).submit(EVIDENCE_PLAN, execution_id="e-2", facts=facts)
        await run_until_idle(config, db)
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute(
                "UPDATE effectus_saga_outbox SET args_canonical = %s "
                "WHERE saga_id = %s AND effect_id = 's1'",
                ('{"n":"n-6","note":"short"}', saga.saga_id),
            )
        text, page = await _shown(db, config, saga.saga_id)
    for shown in (text, page):
        assert "SHA-256 MISMATCH" in shown and "not the arguments its key was made for" in shown
        assert "sha256 ok" in shown  # s2's are intact

"""Probes against the destination kit (contrib/kit_shop_service.py, run as a process on its
own SQLite file): its `GET /effectus/keys/{key}` answers them, and it honours deadlines. A
charge whose answer was lost after the kit committed it is found committed, with the kit's
stored answer as the step's result; a charge that never arrived is found unknown (404), known
not committed past the deadline, and sent again under the same key: one charge per key
either way, on every store of the daemon."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

from effectusd.client import AsyncClient
from effectusd.core.states import OutcomeClass
from effectusd.executors.factory import executor_for
from effectusd.executors.protocol import CallResult, Executor, Invocation
from tests.support.harness import daemon_running, make_config
from tests.support.services import serving

ROOT = Path(__file__).resolve().parents[2]
PROBE = {"path": "/effectus/keys/{key}", "result": "/answer/body", "after": "0s", "every": "1s"}
ARGS = {"account_id": "acc-1", "amount": 100, "currency": "EUR"}


class LosingFirstAnswers:
    """The kit's executor, but every first attempt's answer is lost: for orders named
    ``landed-*`` after the call reached the kit, for the others before it was sent (yet
    reported as maybe sent). Probes (GET) and later attempts pass through."""

    def __init__(self, inner: Executor) -> None:
        self.inner = inner

    async def call(self, invocation: Invocation) -> CallResult:
        if invocation.method == "GET" or invocation.attempt > 1:
            return await self.inner.call(invocation)
        if b'"landed-' in invocation.body:
            await self.inner.call(invocation)
        return CallResult(OutcomeClass.UNKNOWN, error="the answer was lost (test)")

    async def aclose(self) -> None:
        await self.inner.aclose()


def plan(order: str) -> dict[str, object]:
    step = {"id": "charge", "verb": "charge", "args": {**ARGS, "order": order}}
    return {"plan_id": "pay", "steps": [{**step, "compensate": "none"}]}


async def test_the_kit_answers_probes_and_each_key_is_charged_once(
    store_url: str, tmp_path: Path
) -> None:
    shop = tmp_path / "shop.db"
    command = [sys.executable, str(ROOT / "contrib" / "kit_shop_service.py"), "--port", "0"]
    with serving([*command, "--database-url", f"sqlite:///{shop}"], cwd=tmp_path) as base_url:
        config = make_config(
            base_url,
            {"charge": {"path": "/payments/charge", "probe": PROBE}},
            destinations={
                "dest": {"base_url": base_url, "timeout": "2s", "honours_deadline": True}
            },
        )
        executor = LosingFirstAnswers(executor_for("dest", config.destinations["dest"]))
        client = AsyncClient(config, database_url=store_url)
        async with daemon_running(config, store_url, executors={"dest": executor}):
            landed = (await client.submit(plan("landed-1"), execution_id="a")).saga_id
            lost = (await client.submit(plan("never-1"), execution_id="b")).saga_id
            views = [
                await client.wait(saga, timeout=30, until=("completed",)) for saga in (landed, lost)
            ]
        await executor.aclose()
    with sqlite3.connect(shop) as conn:
        charges = dict(conn.execute("SELECT order_id, charge_id FROM kit_shop_charges").fetchall())
    assert sorted(charges) == ["landed-1", "never-1"]
    landed_view, lost_view = views
    assert landed_view.stop_reason == "resolved by probe as committed"
    assert landed_view.steps[0].result == {"charge_id": charges["landed-1"]}
    assert [a.attempt for a in landed_view.steps[0].dispatches[0].attempts] == [1]
    assert lost_view.steps[0].result == {"charge_id": charges["never-1"]}
    assert [a.attempt for a in lost_view.steps[0].dispatches[0].attempts] == [1, 2]
    answered = [e for e in lost_view.timeline if e.kind == "probe_answered"]
    # acted on only once asked past the deadline plus the kit's clock_skew (5 s)
    early = "HTTP 404: not committed, not acted on (asked before the deadline plus clock_skew)"
    assert [(e.to_state, e.evidence) for e in answered][-1] == (
        "retry_wait",
        "HTTP 404: not committed",
    )
    assert all((e.to_state, e.evidence) == (None, early) for e in answered[:-1])

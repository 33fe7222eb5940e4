"""Probes against the destination kit (contrib/kit_shop_service.py, run as a process on its
own SQLite file): its `GET /effectus/keys/{key}` answers them, and it honours deadlines. A
charge whose answer was lost after the kit committed it is found committed, with the kit's
stored answer as the step's result; a charge that never arrived is found unknown (404), known
not committed past the deadline, and sent again under the same key: one charge per key
either way, on every store of the daemon. A charge the kit declined (a stored refusal) whose
answer was lost is found refused (422), never committed: the saga fails with no charge."""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from effectusd.client import AsyncClient
from effectusd.core.states import OutcomeClass
from effectusd.core.transition import Completion
from effectusd.core.views import SagaView
from effectusd.executors.factory import executor_for
from effectusd.executors.protocol import Executor, Invocation
from tests.support.harness import daemon_running, make_config
from tests.support.services import serving

ROOT = Path(__file__).resolve().parents[2]
PROBE = {
    "path": "/effectus/keys/{key}",
    "not_committed": [404, 422],  # unknown, and a stored refusal (replayed to a retry)
    "result": "/answer/body",
    "after": "0s",
    "every": "1s",
}
ARGS = {"account_id": "acc-1", "amount": 100, "currency": "EUR"}


class LosingFirstAnswers:
    """The kit's executor, but every first attempt's answer is lost: for orders named
    ``landed-*`` after the call reached the kit, for the others before it was sent (yet
    reported as maybe sent). Probes (GET) and later attempts pass through."""

    def __init__(self, inner: Executor) -> None:
        self.inner = inner

    async def call(self, invocation: Invocation) -> Completion:
        if invocation.method == "GET" or invocation.attempt > 1:
            return await self.inner.call(invocation)
        if b'"landed-' in invocation.body:
            await self.inner.call(invocation)
        return Completion.answered(
            invocation,
            OutcomeClass.UNKNOWN,
            status_code=None,
            result=None,
            error="the answer was lost (test)",
            evidence={},
            fencing_acknowledged=False,
            fencing_sent=invocation.fencing_sent,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


def plan(order: str, amount: int = 100) -> dict[str, object]:
    args = {**ARGS, "order": order, "amount": amount}
    step = {"id": "charge", "verb": "charge", "args": args}
    return {"plan_id": "pay", "steps": [{**step, "compensate": "none"}]}


@asynccontextmanager
async def kit_shop(store_url: str, shop: Path) -> AsyncIterator[AsyncClient]:
    """The kit shop on its own SQLite file, and a daemon whose verb ``charge`` loses every
    first answer (``LosingFirstAnswers``) and probes the kit's ledger."""
    command = [sys.executable, str(ROOT / "contrib" / "kit_shop_service.py"), "--port", "0"]
    with serving([*command, "--database-url", f"sqlite:///{shop}"], cwd=shop.parent) as base_url:
        config = make_config(
            base_url,
            {"charge": {"path": "/payments/charge", "probe": PROBE}},
            destinations={
                "dest": {"base_url": base_url, "timeout": "2s", "honours_deadline": True}
            },
        )
        executor = LosingFirstAnswers(executor_for("dest", config.destinations["dest"]))
        try:
            async with daemon_running(config, store_url, executors={"dest": executor}):
                yield AsyncClient(config, database_url=store_url)
        finally:
            await executor.aclose()


async def settled(client: AsyncClient, order: str, amount: int = 100) -> SagaView:
    submitted = await client.submit(plan(order, amount), execution_id=order)
    return await client.wait(submitted.saga_id, timeout=30, until=("completed", "failed"))


async def test_the_kit_answers_probes_and_each_key_is_charged_once(
    store_url: str, tmp_path: Path
) -> None:
    shop = tmp_path / "shop.db"
    async with kit_shop(store_url, shop) as client:
        views = [await settled(client, order) for order in ("landed-1", "never-1")]
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


async def test_a_declined_charge_whose_answer_was_lost_is_probed_refused_not_committed(
    store_url: str, tmp_path: Path
) -> None:
    # Found by the chaos row "at_most_once, kit, probes": the kit answered a stored refusal
    # 200 "committed", and the refused step succeeded with the refusal's body as its result.
    shop = tmp_path / "shop.db"
    async with kit_shop(store_url, shop) as client:
        # above the shop's CHARGE_LIMIT: the kit declines (402) and stores it; the answer of
        # that first attempt is lost, so the dispatch blocks and is probed
        view = await settled(client, "landed-declined", amount=20_000)
    with sqlite3.connect(shop) as conn:
        assert conn.execute("SELECT count(*) FROM kit_shop_charges").fetchone()[0] == 0
    assert "HTTP 422" in [e for e in view.timeline if e.kind == "probe_answered"][-1].evidence
    assert view.state == "failed", (view.state, view.stop_reason, view.steps[0].result)

"""Found by the chaos row "at_most_once, kit, probes": a charge the kit declined
(PermanentFailure, 402, stored and replayed to any retry under the key) whose answer was lost
is probed. The kit's `GET /effectus/keys/{key}` answered the stored refusal 200 "committed",
and a probe taking 200 for committed made the step succeed with the refusal's body as its
result, though no charge was ever made. It answers 422 "refused" now, which kit verbs probe as
not committed: the retry under the key gets the refusal replayed and the saga ends failed,
with no charge."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

from effectusd.client import AsyncClient
from effectusd.executors.factory import executor_for
from tests.integration.test_probes_kit import ARGS, PROBE, ROOT, LosingFirstAnswers
from tests.support.harness import daemon_running, make_config
from tests.support.services import serving

DECLINED = 20_000  # above the shop's CHARGE_LIMIT: declined, 402


async def test_a_declined_charge_whose_answer_was_lost_is_not_probed_committed(
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
        # "landed-": the first attempt reaches the kit (which declines and stores it), its
        # answer is lost: the dispatch is blocked_unknown, then probed
        args = {**ARGS, "amount": DECLINED, "order": "landed-declined"}
        step = {"id": "charge", "verb": "charge", "args": args, "compensate": "none"}
        async with daemon_running(config, store_url, executors={"dest": executor}):
            saga = await client.submit({"plan_id": "pay", "steps": [step]}, execution_id="d")
            view = await client.wait(saga.saga_id, timeout=30, until=("completed", "failed"))
        await executor.aclose()
    with sqlite3.connect(shop) as conn:
        charges = conn.execute("SELECT count(*) FROM kit_shop_charges").fetchone()[0]
    assert charges == 0
    assert [e.kind for e in view.timeline if e.kind == "probe_answered"], "never probed"
    assert view.state == "failed", (view.state, view.stop_reason, view.steps[0].result)

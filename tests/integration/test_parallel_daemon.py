"""Parallel steps through the real daemon, PostgreSQL and an HTTP destination (issue 17,
docs/design.md section 4 "Parallel steps"): a fan-out of three then a join."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from effectusd.fencing.store import StoreFencing
from effectusd.store.dialects import open_dispatch_store
from effectusd.store.sql import POSTGRES_STATEMENTS, store_backend
from tests.support.destination import Request, Response, running
from tests.support.harness import client_for, make_config, run_until_idle

pytestmark = pytest.mark.postgres

BRANCHES = ("a", "b", "c")
UNDO = {"verb": "undo", "args": {"n": 0}}


def fan_plan() -> dict[str, Any]:
    steps: list[dict[str, Any]] = [
        {"id": "hold", "verb": "work", "args": {"n": 0}, "compensate": UNDO},
        *(
            {"id": name, "verb": "work", "args": {"n": name}, "compensate": UNDO, "after": ["hold"]}
            for name in BRANCHES
        ),
        {
            "id": "join",
            "verb": "work",
            "args": {"from": [{"$result": name, "path": "/id"} for name in BRANCHES]},
            "compensate": "none",
            "after": list(BRANCHES),
        },
    ]
    return {"plan_id": "fan", "steps": steps}


class BranchesTogether:
    """Holds every branch's call until all three have arrived. The call timeout (2 s) is far
    shorter than the hold, so a branch answers on its first attempt only if the daemon had
    all three in flight at once; ``fail`` answers a permanent failure at once."""

    def __init__(self, fail: str | None = None) -> None:
        self.fail = fail
        self.arrived: set[str] = set()
        self.all_in = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, request: Request) -> Response:
        if request.direction != "forward" or request.effect not in BRANCHES:
            return Response(200, {"id": request.effect})
        with self._lock:
            self.arrived.add(request.effect)
            if self.arrived == set(BRANCHES):
                self.all_in.set()
        if request.effect == self.fail:
            return Response(422, {"error": "no"}, {"X-Effectus-Outcome": "permanent_failure"})
        return Response(200, {"id": request.effect}, stall=self.all_in)


def _config(base_url: str) -> Any:
    return make_config(base_url, {"work": {}, "undo": {}})


async def test_a_fan_out_of_three_runs_together_then_the_join_gets_their_results(
    db: str,
) -> None:
    with running(BranchesTogether()) as dest:
        config = _config(dest.base_url)
        client = client_for(config, db)
        saga = client.submit(fan_plan(), execution_id="fan-1").saga_id
        await run_until_idle(config, db)

        view = client.get(saga)
        assert view is not None and view.state == "completed", view.stop_reason
        forward = [r.effect for r in dest.seen(direction="forward")]
        assert forward[0] == "hold" and forward[-1] == "join"
        assert sorted(forward[1:4]) == list(BRANCHES)
        assert all(r.attempt == 1 for r in dest.requests)  # none timed out: sent together
        [join] = dest.seen("join")
        assert join.json()["from"] == list(BRANCHES)
        orders = {s.effect_id: s.succeeded_order for s in view.steps}
        assert orders["hold"] == 1 and orders["join"] == 5


async def test_a_failed_branch_waits_for_its_siblings_in_flight_and_undoes_them_latest_first(
    db: str,
) -> None:
    with running(BranchesTogether(fail="b")) as dest:
        config = _config(dest.base_url)
        client = client_for(config, db)
        saga = client.submit(fan_plan(), execution_id="fan-2").saga_id
        await run_until_idle(config, db)

        view = client.get(saga)
        assert view is not None and view.state == "compensated", view.stop_reason
        assert view.stop_reason is not None and "'b' failed" in view.stop_reason
        assert not dest.seen("join")
        succeeded = {
            s.effect_id: s.succeeded_order for s in view.steps if s.succeeded_order is not None
        }
        assert set(succeeded) == {"hold", "a", "c"}  # in flight when b failed: waited for
        undone = [r.effect for r in dest.seen(direction="compensation")]
        assert undone == sorted(succeeded, key=succeeded.__getitem__, reverse=True)
        assert undone[-1] == "hold"
        assert all(r.attempt == 1 for r in dest.requests)


async def test_the_recorders_lock_keeps_a_claim_off_a_sibling_not_yet_sent(db: str) -> None:
    """The lock the recorder takes on a saga's unsent forward dispatches before it decides
    (lock_dispatches with the saga's id): a claim skips them until the recorder commits."""
    config = _config("http://127.0.0.1:9")
    saga = client_for(config, db).submit(fan_plan(), execution_id="fan-3").saga_id
    text = POSTGRES_STATEMENTS.text("lock_dispatches")
    store = await open_dispatch_store(
        store_backend(db), config.registry(), "daemon", 30.0, StoreFencing()
    )
    try:
        with psycopg.connect(db) as recorder:
            locked = recorder.execute(text, {"dispatch_ids": [], "saga_ids": [saga]}).fetchall()
            assert len(locked) == 1  # hold, queued
            assert await store.claim({"dest": 4}) == []
            recorder.rollback()
        assert [c.effect_id for c in await store.claim({"dest": 4})] == ["hold"]
    finally:
        await store.close()

"""Claims on PostgreSQL: the recorder claims the next step where it writes it, in the
transaction that records the step before, and only into a free slot of this daemon's (a
record that does not commit gives back every slot it took: tests/conformance/test_poison.py);
the claim statement commits without waiting for its WAL, and only its own transaction."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from effectusd.backends.postgres.runner import sql
from effectusd.bench.claims import claim_params
from effectusd.config import parse_config
from effectusd.core.states import OutcomeClass
from effectusd.dispatcher import assembly
from effectusd.dispatcher.capacity import Capacity
from effectusd.dispatcher.metrics import Metrics
from effectusd.dispatcher.pipeline import Pipeline
from effectusd.executors.factory import executor_for
from effectusd.store.dispatch import DispatchStore
from effectusd.store.sql import POSTGRES_STATEMENTS as STORE_STATEMENTS
from tests.conformance.support import StoreUnderTest, completion, send
from tests.support.destination import running
from tests.support.harness import client_for, fetch, make_config, run_until_idle, serial_plan

pytestmark = pytest.mark.postgres


async def test_each_next_step_is_claimed_in_the_transaction_that_records_the_one_before(
    db: str,
) -> None:
    # A finished call wakes the claim loop, which reserves the free slots it asks for while its
    # statement runs; under load that statement can outlast the recorder's reads, and the
    # recorder then finds no slot (seen once in CI). One row per claim (batch_size 1) leaves
    # the recorder 14 of the destination's 16 slots whatever the claim loop is doing.
    with running() as dest:
        config = make_config(dest.base_url, {"work": {}}, dispatcher={"batch_size": 1})
        client = client_for(config, db)
        saga = client.submit(serial_plan("three", ["work"] * 3), execution_id="x-1").saga_id
        await run_until_idle(config, db)

    assert [r.effect for r in dest.requests] == ["s1", "s2", "s3"]
    # A claim made where its row is written takes the row's birth as its time; the claim
    # loop's claim comes in a later transaction, after the row was committed.
    claimed = {  # a claim's record is the attempt row it opens
        row["effect_id"]: (row["claimed_at"], row["created_at"])
        for row in fetch(
            db,
            "SELECT o.effect_id, a.claimed_at, o.created_at FROM effectus_saga_attempts a "
            "JOIN effectus_saga_outbox o USING (dispatch_id) WHERE o.saga_id = %s",
            saga,
        )
    }
    assert {effect: at == born for effect, (at, born) in claimed.items()} == {
        "s1": False,  # the first step is claimed by the claim loop
        "s2": True,
        "s3": True,
    }
    assert claimed["s1"][0] > claimed["s1"][1]
    # and the timeline reads in order: each claim follows what enqueued it
    timeline = [(e.effect_id, e.kind) for e in client.get(saga).timeline]  # type: ignore[union-attr]
    for before, after in (("s1", "s2"), ("s2", "s3")):
        assert timeline.index((before, "attempt_settled")) < timeline.index(
            (after, "dispatch_claimed")
        )
    for effect in ("s2", "s3"):
        [dispatch] = fetch(
            db,
            "SELECT o.state, o.attempt, o.lease_owner, a.sent_at IS NOT NULL AS sent, a.outcome "
            "FROM effectus_saga_outbox o JOIN effectus_saga_attempts a USING (dispatch_id) "
            "WHERE o.saga_id = %s AND o.effect_id = %s",
            saga,
            effect,
        )
        assert dispatch == {
            "state": "succeeded",
            "attempt": 1,
            "lease_owner": None,
            "sent": True,
            "outcome": "success",
        }


async def test_the_recorder_takes_no_slot_a_destination_does_not_have(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two destinations, one of them limited to one call at a time: whoever takes the slot,
    claim loop or recorder, no destination ever has more in flight than its limit."""
    most: dict[str, int] = {}

    class Watched(dict[str, int]):
        def __setitem__(self, destination: str, slots: int) -> None:
            super().__setitem__(destination, slots)
            most[destination] = max(most.get(destination, 0), slots)

    def watched_capacity(**kwargs: Any) -> Capacity:
        return Capacity(**kwargs, in_flight=Watched())

    monkeypatch.setattr(assembly, "Capacity", watched_capacity)  # the daemon's slots
    with running() as narrow, running() as wide:
        config = parse_config(
            {
                "destinations": {
                    "narrow": {"base_url": narrow.base_url, "max_concurrency": 1},
                    "wide": {"base_url": wide.base_url, "max_concurrency": 3},
                },
                "dispatcher": {"concurrency": 4, "poll_interval": "50ms"},
                "verbs": {
                    "n": {"destination": "narrow", "path": "/n"},
                    "w": {"destination": "wide", "path": "/w"},
                },
            }
        )
        client = client_for(config, db)
        sagas = [
            client.submit(serial_plan("mixed", ["w", "n", "w", "n"]), execution_id=f"x-{i}")
            for i in range(30)
        ]
        await run_until_idle(config, db)

    assert all(client.get(s.saga_id).state == "completed" for s in sagas)  # type: ignore[union-attr]
    assert len(narrow.requests) == 60 and len(wide.requests) == 60
    assert most == {"narrow": 1, "wide": 3}


def test_the_claim_alone_commits_without_waiting_for_its_wal(db: str) -> None:
    with running() as dest:
        config = make_config(dest.base_url, {"work": {}})
        client_for(config, db).submit(serial_plan("one", ["work"]), execution_id="x-1")
    plain = {**claim_params(config), "write_ahead": False}  # the store's claim: nothing ahead
    with psycopg.connect(db, autocommit=True) as conn:
        with conn.transaction(force_rollback=True):
            claimed = conn.execute(sql(STORE_STATEMENTS, "claim_ready"), plain)
            assert len(claimed.fetchall()) == 1
            assert conn.execute("SHOW synchronous_commit").fetchone() == ("off",)
        # the setting ended with the claim's transaction: what the connection runs next (a
        # write-ahead, a record) commits synchronously
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)


def test_a_claim_that_writes_a_row_ahead_commits_synchronously(db: str) -> None:
    """The daemon's claim (write_ahead) is the write-ahead of the unfenced rows it writes
    ahead: its commit waits for the WAL as a write-ahead's does. A claim that wrote nothing
    ahead (its one row fenced) still commits without waiting."""
    with running() as dest:
        config = make_config(dest.base_url, {"work": {}, "locked": {"fencing": ["r:{args.n}"]}})
        client = client_for(config, db)
        client.submit(serial_plan("locked", ["locked"]), execution_id="x-1")
        client.submit(serial_plan("work", ["work"]), execution_id="x-2")
    params = {**claim_params(config), "write_ahead": True, "total": 1}
    with psycopg.connect(db, autocommit=True, row_factory=dict_row) as conn:
        # one row per claim, the older first: the fenced one, then the other
        for verb, written_ahead, setting in (("locked", False, "off"), ("work", True, "on")):
            with conn.transaction():
                [claimed] = conn.execute(sql(STORE_STATEMENTS, "claim_ready"), params).fetchall()
                assert (claimed["verb"], claimed["written_ahead"]) == (verb, written_ahead)
                shown = conn.execute("SHOW synchronous_commit").fetchone()
                assert shown == {"synchronous_commit": setting}


async def test_the_daemon_writes_ahead_only_what_its_claims_did_not(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unfenced steps, whether the claim loop or the recorder claims them, are born written
    ahead and called with no write-ahead statement; a fenced step takes its tokens in one."""
    through: list[str] = []
    write_ahead = DispatchStore.write_ahead

    async def watched(self: DispatchStore, claims: Any) -> Any:
        through.extend(claim.effect_id for claim in claims)
        return await write_ahead(self, claims)

    monkeypatch.setattr(DispatchStore, "write_ahead", watched)
    with running() as dest:
        config = make_config(dest.base_url, {"work": {}, "locked": {"fencing": ["r:{args.n}"]}})
        client = client_for(config, db)
        saga = client.submit(serial_plan("mixed", ["work", "locked", "work"]), execution_id="x")
        await run_until_idle(config, db)

    assert client.get(saga.saga_id).state == "completed"  # type: ignore[union-attr]
    assert through == ["s2"]
    requests = {r.effect: r.headers for r in dest.requests}
    assert sorted(requests) == ["s1", "s2", "s3"]
    grants = {effect: headers["x-effectus-fencing-grants"] for effect, headers in requests.items()}
    assert {effect: "r:2" in text for effect, text in grants.items()} == {
        "s1": False,
        "s2": True,
        "s3": False,
    }
    sent = fetch(
        db,
        "SELECT o.effect_id, a.sent_at IS NOT NULL AS sent, a.fencing_status "
        "FROM effectus_saga_attempts a JOIN effectus_saga_outbox o USING (dispatch_id) "
        "WHERE o.saga_id = %s ORDER BY o.effect_id",
        saga.saga_id,
    )
    assert sent == [
        {"effect_id": "s1", "sent": True, "fencing_status": "not_requested"},
        {"effect_id": "s2", "sent": True, "fencing_status": "propagated"},
        {"effect_id": "s3", "sent": True, "fencing_status": "not_requested"},
    ]


@pytest.mark.parametrize("verb", ["pay_alo", "pay", "fenced"])
async def test_a_next_step_waits_for_its_full_destinations_slot_only_where_that_costs_no_guard(
    db: str, verb: str
) -> None:
    """The destination has one slot, taken by saga B's call. Saga A's first step succeeds:
    its next step is an unfenced at_least_once one (pay_alo), so the record claims it into a
    place waiting for that slot, written ahead, and it is called as soon as B's call ends,
    before the claim loop could take the slot. An at_most_once step (pay) would block its saga
    if the daemon died before calling it, and a fenced one takes its tokens right before its
    call: both are written queued, for the claim loop, as before."""
    under_test = StoreUnderTest("postgres", db)
    try:
        a = under_test.submit(serial_plan("a", [verb, verb]), "x-a")
        b = under_test.submit(serial_plan("b", ["pay_alo"]), "x-b")
        daemon = await under_test.dispatch_store()
        claims = {c.saga_id: c for c in await daemon.claim({"dest": 2}, write_ahead=True)}
        for claim in claims.values():
            if not claim.written_ahead:
                await send(daemon, claim)
        with running() as dest:
            config = under_test.config.destinations["dest"]
            executor = executor_for("dest", config.model_copy(update={"base_url": dest.base_url}))
            pipeline = Pipeline(
                daemon,
                {"dest": executor},
                under_test.registry,
                Capacity(limits={"dest": 1}, total_limit=4, wait_limits={"dest": 1}),
                asyncio.Event(),
                Metrics(),
            )
            try:
                pipeline.capacity.take("dest")  # B's call is in flight
                await pipeline.recorder.record([completion(claims[a], OutcomeClass.SUCCESS)])
                [second] = fetch(
                    db,
                    "SELECT o.state, a.sent_at IS NOT NULL AS sent FROM effectus_saga_outbox o "
                    "LEFT JOIN effectus_saga_attempts a USING (dispatch_id) "
                    "WHERE o.saga_id = %s AND o.effect_id = 's2'",
                    a,
                )
                waits = verb == "pay_alo"
                assert second == (
                    {"state": "in_flight", "sent": True}
                    if waits
                    else {"state": "queued", "sent": False}
                )
                assert [c.effect_id for c, _ in pipeline.waiting.get("dest", [])] == (
                    ["s2"] if waits else []
                )
                assert waiting_gauge(pipeline) == (1 if waits else None)
                assert pipeline.capacity.in_flight == {"dest": 1} and dest.requests == []
                assert not pipeline.idle

                # B's call ends: its slot goes to the waiting claim at once, not to a claim
                pipeline._finish(claims[b], completion(claims[b], OutcomeClass.SUCCESS))
                assert pipeline.capacity.in_flight == {"dest": 1 if waits else 0}
                assert pipeline.waiting == {} and pipeline.capacity.waiting["dest"] == 0
                assert waiting_gauge(pipeline) == (0 if waits else None)
                await asyncio.wait_for(asyncio.gather(*pipeline.calls), timeout=60)
                assert [r.headers["x-effectus-saga-id"] for r in dest.requests] == (
                    [a] if waits else []
                )
                pipeline.claiming = False
                while pipeline.recorder.waiting:
                    await pipeline.recorder.round()
            finally:
                await executor.aclose()
        assert pipeline.capacity.busy == 0 and pipeline.idle
        assert under_test.view(b)["state"] == "completed"
        assert under_test.view(a)["state"] == ("completed" if waits else "running")
    finally:
        await under_test.close()


def waiting_gauge(pipeline: Pipeline) -> float | None:
    """effectusd_claims_waiting_for_slot{destination="dest"} (None: never set)."""
    return pipeline.metrics.registry.get_sample_value(
        "effectusd_claims_waiting_for_slot", {"destination": "dest"}
    )

"""Claims and leases, the write-ahead, and the reclaim of expired leases."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from effectusd.core.identity import argument_hash, idempotency_key
from effectusd.core.states import Delivery, Direction, OutcomeClass
from effectusd.dispatcher.capacity import Capacity
from effectusd.store.dispatch import DispatchStore
from effectusd.store.records import Claim
from tests.conformance.support import (
    LEASE_MARGIN_S,
    NOWHERE,
    TIMEOUT_S,
    StoreUnderTest,
    claim_one,
    completion,
    dispatch_in,
    send,
    timeline,
    when,
)
from tests.support.harness import make_config, serial_plan


def submit_many(store: StoreUnderTest, verb: str, n: int, prefix: str = "e") -> list[str]:
    return [store.submit(serial_plan(f"p-{verb}", [verb]), f"{prefix}-{i}") for i in range(n)]


async def test_a_claim_leases_due_rows_within_each_destinations_free_slots(
    store: StoreUnderTest,
) -> None:
    to_dest = submit_many(store, "pay", 3)
    to_other = submit_many(store, "ship", 2)
    later = store.submit(
        serial_plan("p-later", ["pay"]),
        "later",
        not_before=datetime.now(UTC) + timedelta(hours=1),
    )
    daemon = await store.dispatch_store(owner="daemon-a")

    assert await daemon.claim({"dest": 0, "other": 0}) == []
    claims = await daemon.claim({"dest": 2, "other": 5})
    by_destination = sorted((c.destination, c.saga_id) for c in claims)
    assert [d for d, _ in by_destination] == ["dest", "dest", "other", "other"]
    assert {s for _, s in by_destination} <= set(to_dest) | set(to_other)
    assert later not in {c.saga_id for c in claims}

    for claim in claims:
        assert claim.attempt == 1 and claim.effect_id == "s1"
        assert claim.lease_token and claim.request_id
        # the lease runs for the call's timeout plus the margin, from the database clock
        assert claim.lease_seconds == pytest.approx(TIMEOUT_S + LEASE_MARGIN_S, abs=1.0)
        assert abs((claim.db_now - datetime.now(UTC)).total_seconds()) < 5
        view = store.view(claim.saga_id)
        dispatch = dispatch_in(view, "s1")
        assert (dispatch["state"], dispatch["attempt"], dispatch["lease_owner"]) == (
            "in_flight",
            1,
            "daemon-a",
        )
        assert when(dispatch["lease_expires_at"]) == claim.lease_expires_at
        [attempt] = dispatch["attempts"]
        assert (attempt["attempt"], attempt["lease_owner"], attempt["outcome"]) == (
            1,
            "daemon-a",
            None,
        )
        assert attempt["sent_at"] is None and attempt["request_id"] == claim.request_id
        assert when(attempt["lease_expires_at"]) == claim.lease_expires_at
        assert timeline(view, "dispatch_claimed") == [
            ("dispatch_claimed", "s1", "forward", 1, "queued", "in_flight")
        ]
        assert view["timeline"][-1]["actor"] == "daemon-a"
    assert len({c.lease_token for c in claims}) == len(claims)

    # a second claimer gets only what is still due and unleased
    second = await store.dispatch_store(owner="daemon-b")
    rest = await second.claim({"dest": 10, "other": 10})
    assert [c.saga_id for c in rest] == [s for s in to_dest if s not in {c.saga_id for c in claims}]
    assert await second.claim({"dest": 10, "other": 10}) == []
    assert await daemon.claim({"dest": 10, "other": 10}) == []
    assert await daemon.outbox_counts(horizon_s=1.0) == (5, 0)


async def test_a_row_is_not_claimed_before_it_is_due(store: StoreUnderTest) -> None:
    saga = store.submit(
        serial_plan("p", ["pay"]), "x", not_before=datetime.now(UTC) + timedelta(hours=1)
    )
    daemon = await store.dispatch_store()
    assert await daemon.claim({"dest": 10}) == []
    waiting = await daemon.seconds_until_due(["dest"])
    assert waiting is not None and 3590 < waiting <= 3600
    assert await daemon.seconds_until_due(["other"]) is None
    assert (await daemon.sample()).ready_depth == 0

    store.make_due()
    assert (await daemon.sample()).ready_depth == 1
    [claim] = await daemon.claim({"dest": 10})
    assert claim.saga_id == saga


async def test_the_write_ahead_marks_the_attempt_sent_before_the_call(
    store: StoreUnderTest,
) -> None:
    saga = store.submit(serial_plan("p", ["pay"]), "x")
    daemon = await store.dispatch_store()
    claim = await claim_one(daemon)
    before = dispatch_in(store.view(saga), "s1")["attempts"][0]
    assert before["sent_at"] is None and before["fencing_status"] is None

    ready, busy = await daemon.write_ahead([claim])
    assert busy == [] and [w.claim for w in ready] == [claim]
    assert (ready[0].grants, ready[0].fencing_status) == ((), "not_requested")
    [attempt] = dispatch_in(store.view(saga), "s1")["attempts"]
    assert attempt["sent_at"] is not None and attempt["fencing_status"] == "not_requested"
    assert when(attempt["sent_at"]) >= when(attempt["claimed_at"])
    assert attempt["grants"] == []

    # marking it again is refused: "may have been sent" is written once per attempt
    assert await daemon.write_ahead([claim]) == ([], [])
    assert dispatch_in(store.view(saga), "s1")["attempts"][0]["sent_at"] == attempt["sent_at"]


async def test_the_daemons_claim_says_written_ahead_exactly_where_the_attempt_is_marked(
    store: StoreUnderTest,
) -> None:
    """The daemon claims with ``write_ahead``: PostgreSQL writes an unfenced row ahead in the
    claim itself (the daemon then calls it with no write-ahead statement); a fenced row never
    is, its tokens come in its own write-ahead; SQLite writes ahead separately. Either way a
    claim says ``written_ahead`` exactly when its attempt row carries the mark."""
    sagas = {
        verb: store.submit(serial_plan(f"p-{verb}", [verb]), f"w-{verb}")
        for verb in ("pay", "pay_alo", "fenced")
    }
    daemon = await store.dispatch_store()
    claims = {c.verb: c for c in await daemon.claim({"dest": 10}, write_ahead=True)}
    assert sorted(claims) == ["fenced", "pay", "pay_alo"]
    for verb, claim in claims.items():
        [attempt] = dispatch_in(store.view(sagas[verb]), "s1")["attempts"]
        assert claim.written_ahead is (attempt["sent_at"] is not None), verb
        if claim.written_ahead:
            assert (attempt["fencing_status"], attempt["grants"]) == ("not_requested", [])
            assert when(attempt["sent_at"]) >= when(attempt["claimed_at"])
    assert not claims["fenced"].written_ahead
    assert claims["pay"].written_ahead is claims["pay_alo"].written_ahead is not store.sqlite

    # what is not written ahead takes the write-ahead as before; what is, cannot be marked twice
    assert (await send(daemon, claims["fenced"])).grants
    if not store.sqlite:
        assert await daemon.write_ahead([claims["pay"]]) == ([], [])


async def test_the_write_ahead_refuses_an_expired_or_superseded_lease(
    store: StoreUnderTest,
) -> None:
    saga = store.submit(serial_plan("p", ["pay"]), "x")
    daemon = await store.dispatch_store()
    first = await claim_one(daemon)
    store.expire_leases()
    assert await daemon.write_ahead([first]) == ([], [])  # the lease ran out: not ours to send

    report = await daemon.reclaim_expired()
    assert report.applied == 1
    store.make_due()
    second = await claim_one(await store.dispatch_store(owner="daemon-b"))
    assert second.attempt == 2 and second.lease_token != first.lease_token

    assert await daemon.write_ahead([first]) == ([], [])  # attempt 1 was superseded
    wrong_token = replace(second, lease_token=str(uuid.uuid4()))  # right attempt, not its token
    assert await daemon.write_ahead([wrong_token]) == ([], [])
    attempts = dispatch_in(store.view(saga), "s1")["attempts"]
    assert [a["sent_at"] for a in attempts] == [None, None]
    await send(daemon, second)  # the holder itself may
    assert dispatch_in(store.view(saga), "s1")["attempts"][1]["sent_at"] is not None


async def test_a_live_lease_is_not_reclaimed(store: StoreUnderTest) -> None:
    saga = store.submit(serial_plan("p", ["pay"]), "x")
    daemon = await store.dispatch_store()
    await claim_one(daemon)
    report = await daemon.reclaim_expired()
    assert (report.applied, report.late, report.dropped) == (0, 0, 0)
    assert dispatch_in(store.view(saga), "s1")["state"] == "in_flight"


async def test_reclaim_of_a_lease_that_expired_before_the_write_ahead_retries(
    store: StoreUnderTest,
) -> None:
    saga = store.submit(serial_plan("p", ["pay"]), "x")  # at_most_once: still safe to retry
    daemon = await store.dispatch_store()
    claim = await claim_one(daemon)
    store.expire_leases()
    report = await (await store.dispatch_store(owner="reclaimer")).reclaim_expired()
    assert report.applied == 1

    view = store.view(saga)
    dispatch = dispatch_in(view, "s1")
    assert (dispatch["state"], dispatch["uncertain_attempt"], dispatch["lease_owner"]) == (
        "retry_wait",
        None,
        None,
    )
    assert dispatch["last_outcome"] == "retryable_failure_known_not_committed"
    [attempt] = dispatch["attempts"]
    assert (attempt["outcome"], attempt["settled_by"]) == (
        "retryable_failure_known_not_committed",
        "reclaim",
    )
    assert "before anything was sent" in attempt["error"]
    assert view["state"] == "running"
    # the holder that lost its lease reports too late: that changes nothing
    late = await daemon.record([completion(claim, OutcomeClass.SUCCESS, result={"ok": 1})])
    assert (late.applied, late.late) == (0, 1)
    assert dispatch_in(store.view(saga), "s1")["state"] == "retry_wait"


@pytest.mark.parametrize(
    ("verb", "dispatch_state", "saga_state"),
    [("pay", "blocked_unknown", "blocked_unknown"), ("pay_alo", "retry_wait", "running")],
)
async def test_reclaim_of_a_lease_that_expired_after_the_write_ahead_is_uncertain(
    store: StoreUnderTest, verb: str, dispatch_state: str, saga_state: str
) -> None:
    saga = store.submit(serial_plan("p", [verb]), "x")
    daemon = await store.dispatch_store()
    await send(daemon, await claim_one(daemon))
    store.expire_leases()
    assert (await daemon.reclaim_expired()).applied == 1

    view = store.view(saga)
    dispatch = dispatch_in(view, "s1")
    assert (dispatch["state"], dispatch["uncertain_attempt"]) == (dispatch_state, 1)
    [attempt] = dispatch["attempts"]
    assert (attempt["outcome"], attempt["settled_by"]) == ("unknown_outcome", "reclaim")
    assert "may have been sent" in attempt["error"]
    assert view["state"] == saga_state
    if saga_state == "blocked_unknown":
        assert "at_most_once" in view["stop_reason"]
        store.make_due()
        assert await daemon.claim({"dest": 10}) == []  # never sent again by itself
    else:
        store.make_due()
        again = await claim_one(daemon)
        assert again.attempt == 2
        assert again.idempotency_key == dispatch["idempotency_key"]  # the same key


async def test_a_lease_lost_after_the_daemons_claim_is_settled_by_the_mark_the_claim_left(
    store: StoreUnderTest,
) -> None:
    """A daemon that dies between its claim and the call: where the claim wrote the row ahead
    (PostgreSQL), the attempt may have been sent and an at_most_once saga blocks, never
    re-sent; where it did not (SQLite), nothing was sent and the row is simply due again."""
    saga = store.submit(serial_plan("p", ["pay"]), "x")
    daemon = await store.dispatch_store()
    [claim] = await daemon.claim({"dest": 1}, write_ahead=True)
    store.expire_leases()
    assert (await (await store.dispatch_store(owner="reclaimer")).reclaim_expired()).applied == 1

    dispatch = dispatch_in(store.view(saga), "s1")
    [attempt] = dispatch["attempts"]
    if claim.written_ahead:
        assert (dispatch["state"], attempt["outcome"]) == ("blocked_unknown", "unknown_outcome")
        assert "may have been sent" in attempt["error"]
    else:
        assert (dispatch["state"], attempt["outcome"]) == (
            "retry_wait",
            "retryable_failure_known_not_committed",
        )
        assert "before anything was sent" in attempt["error"]
    assert claim.written_ahead is not store.sqlite


async def test_two_reclaimers_settle_an_expired_attempt_once(store: StoreUnderTest) -> None:
    saga = store.submit(serial_plan("p", ["pay_alo"]), "x")
    daemon = await store.dispatch_store()
    await send(daemon, await claim_one(daemon))
    store.expire_leases()
    first = await (await store.dispatch_store(owner="r1")).reclaim_expired()
    second = await (await store.dispatch_store(owner="r2")).reclaim_expired()
    assert (first.applied, second.applied) == (1, 0)
    settled = timeline(store.view(saga), "attempt_settled")
    assert settled == [("attempt_settled", "s1", "forward", 1, "in_flight", "retry_wait")]


async def test_a_claim_carries_everything_the_call_needs(store: StoreUnderTest) -> None:
    saga = store.submit(serial_plan("p", ["fenced"]), "x")
    daemon = await store.dispatch_store()
    claim = await claim_one(daemon)
    contract = store.registry.verbs["fenced"]
    assert (claim.saga_id, claim.execution_id, claim.effect_id) == (saga, "x", "s1")
    assert (claim.direction, claim.delivery) == (Direction.FORWARD, Delivery.AT_LEAST_ONCE)
    assert (claim.destination, claim.verb, claim.method, claim.path) == (
        "dest",
        "fenced",
        "POST",
        "/fenced",
    )
    assert claim.body == b'{"n":1}' and claim.args_hash == argument_hash(claim.body)
    assert claim.contract_hash == contract.contract_hash
    assert claim.idempotency_key == idempotency_key("default", saga, "s1", Direction.FORWARD)
    assert claim.fencing_resources == ("res:1",)
    assert claim.timeout_ms == int(TIMEOUT_S * 1000)
    for moment in (claim.db_now, claim.created_at, claim.lease_expires_at):
        assert moment.utcoffset() is not None
    assert claim.created_at <= claim.db_now < claim.lease_expires_at


async def test_concurrent_claimers_never_lease_a_row_twice(store: StoreUnderTest) -> None:
    sagas = {store.submit(serial_plan("p", ["pay"]), f"x-{i}") for i in range(60)}
    claimers = [await store.dispatch_store(owner=f"daemon-{n}") for n in (1, 2)]

    async def claim_all(claimer: DispatchStore) -> list[Claim]:
        taken: list[Claim] = []
        while claims := await claimer.claim({"dest": 3}):
            taken += claims
        return taken

    first, second = await asyncio.gather(*(claim_all(c) for c in claimers))
    claimed = [c.saga_id for c in first + second]
    assert len(claimed) == len(set(claimed)) == len(sagas)
    assert set(claimed) == sagas
    assert {c.attempt for c in first + second} == {1}
    assert await claimers[0].outbox_counts(horizon_s=0) == (60, 0)


def many_destinations(store: StoreUnderTest, count: int) -> list[str]:
    """``count`` destinations with the default limits, one verb each."""
    names = [f"d{i:02}" for i in range(count)]
    store.config = make_config(
        NOWHERE,
        {f"v-{name}": {"destination": name} for name in names},
        destinations={name: {"base_url": NOWHERE} for name in names},
    )
    return names


@pytest.mark.parametrize("count", [6, 20])
async def test_the_overall_room_is_dealt_to_the_destinations_with_due_rows(
    store: StoreUnderTest, count: int
) -> None:
    names = many_destinations(store, count)
    busy = names[-3:]  # the last destinations in config order, which idle ones used to starve
    for name in busy:
        submit_many(store, f"v-{name}", 20, prefix=name)
    capacity = Capacity(
        limits={n: d.max_concurrency for n, d in store.config.destinations.items()},
        total_limit=store.config.dispatcher.concurrency,
    )
    assert capacity.total_limit < sum(capacity.limits.values())  # C below the sum of limits
    daemon = await store.dispatch_store()

    # a little room: shared in turns, each busy destination gets its part
    capacity.in_flight = {names[0]: capacity.total_limit - 7}
    claims = await daemon.claim(capacity.free(), capacity.room)
    per_destination = Counter(c.destination for c in claims)
    assert len(claims) == 7
    assert set(per_destination) == set(busy)
    assert max(per_destination.values()) - min(per_destination.values()) <= 1

    # all the room: every busy destination fills up to its own limit, idle ones hold nothing
    capacity.in_flight = {}
    claims = await daemon.claim(capacity.free(), capacity.room)
    per_destination = Counter(c.destination for c in claims)
    assert per_destination == {name: 16 for name in busy}

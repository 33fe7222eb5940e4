"""Fencing kept by the store (durable_monotonic): tokens, leases, partial acquisitions, and
fencing inside the write-ahead. The in-memory provider is checked here too, as the contrast."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from effectusd.backends.operation import Operation
from effectusd.core.states import Cause, FencingGuarantee, OutcomeClass
from effectusd.fencing.memory import MemoryFencing
from effectusd.fencing.protocol import FenceBusy, FenceHolder, FencingProvider, Grants
from effectusd.fencing.store import StoreFencing
from effectusd.store.dispatch import DispatchStore
from tests.conformance.support import (
    RETRY,
    StoreUnderTest,
    completion,
    dispatch_in,
    sagas_with_one_unfenceable,
    send,
)
from tests.support import backends
from tests.support.harness import serial_plan
from tests.support.tokens import database_clock, ticks


def holder(n: int, ttl: float = 60.0) -> FenceHolder:
    """Holder ``n``; its lease token is a UUID because PostgreSQL stores it as one."""
    return FenceHolder(
        n, f"00000000-0000-0000-0000-{n:012d}", datetime.now(UTC) + timedelta(seconds=ttl)
    )


def held(who: FenceHolder) -> list[tuple[int, str]]:
    return [(who.dispatch_id, who.lease_token)]


def only(grants: Grants, resource: str) -> int:
    """The token of a grant of ``resource`` alone."""
    [(granted, token)] = grants
    assert granted == resource
    return token


def try_acquire(
    provider: FencingProvider, who: FenceHolder, resources: Sequence[str]
) -> Operation[Grants | str]:
    """Acquire as the write-ahead does: a busy resource is an answer, not a rollback."""
    try:
        return (yield from provider.acquire(who, resources))
    except FenceBusy as busy:
        return busy.resource


def acquire_logged(
    provider: FencingProvider, who: FenceHolder, log: list[tuple[int, int]], lock: threading.Lock
) -> Operation[None]:
    """Take the lease, note the token while still holding it, give it back: one transaction."""
    [(_, token)] = yield from provider.acquire(who, ["account:1"])
    with lock:
        log.append((who.dispatch_id, token))
    yield from provider.release(held(who))


def test_tokens_strictly_increase_without_duplicates_when_two_connections_race(
    store: StoreUnderTest,
) -> None:
    rounds = 150
    log: list[tuple[int, int]] = []
    lock = threading.Lock()
    start = threading.Barrier(2)
    failures: list[BaseException] = []
    busy = [0, 0]

    def client(who: int) -> None:
        try:
            with store.connect() as conn:  # each thread its own connection
                start.wait(timeout=30)
                taken = 0
                while taken < rounds:
                    try:
                        backends.run(conn, acquire_logged(StoreFencing(), holder(who), log, lock))
                    except FenceBusy:
                        busy[who - 1] += 1  # held by the other one right now: try again
                        assert busy[who - 1] < rounds, "the other holder never lets go"
                        continue
                    taken += 1
        except BaseException as exc:  # noqa: BLE001 - reported in the test's thread below
            failures.append(exc)

    floor = ticks(database_clock(store.url))  # the database clock's floor before any grant
    threads = [threading.Thread(target=client, args=(who,)) for who in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not failures, failures
    assert not any(thread.is_alive() for thread in threads)

    tokens = [token for _, token in log]
    assert len(tokens) == 2 * rounds
    # noted while the lease was held, so the log is in grant order: every grant is larger
    # than every earlier one, and none is handed out twice
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)
    assert tokens[0] >= floor  # above the clock (design section 8), not from 1
    assert {who for who, _ in log} == {1, 2}
    assert busy == [0, 0]
    assert store.fence_leases() == []
    assert store.execute("SELECT last_token FROM effectus_fencing_counters") == [(tokens[-1],)]


def test_a_live_lease_refuses_another_holder_and_a_partial_acquisition_is_given_back(
    store: StoreUnderTest,
) -> None:
    provider = StoreFencing()
    first, second = holder(1), holder(2)
    taken = only(store.run(provider.acquire(first, ["b"])), "b")

    # "a" is free, "b" is not: second gets neither, and the transaction still commits
    assert store.run(try_acquire(provider, second, ["a", "b"])) == "b"
    assert store.fence_leases() == [("b", 1, taken)]
    # raised out of the transaction, it is the same
    with pytest.raises(FenceBusy) as refused:
        store.run(provider.acquire(second, ["a", "b"]))
    assert refused.value.resource == "b"
    assert store.fence_leases() == [("b", 1, taken)]

    # the holder itself may take its lease again, with a new token; others still may not
    again = only(store.run(provider.acquire(first, ["b"])), "b")
    assert again > taken
    assert store.run(try_acquire(provider, second, ["b"])) == "b"
    # "a" was given back: anyone may have it
    [(resource, token)] = store.run(provider.acquire(second, ["a"]))
    assert resource == "a" and token >= 1

    store.run(provider.release(held(first)))
    assert store.fence_leases() == [("a", 2, token)]
    assert only(store.run(provider.acquire(second, ["b"])), "b") > again


def test_an_expired_lease_is_taken_over_with_a_larger_token(store: StoreUnderTest) -> None:
    provider = StoreFencing()
    [(_, dead)] = store.run(provider.acquire(holder(1, ttl=-1), ["r"]))  # already expired
    [(_, alive)] = store.run(provider.acquire(holder(2), ["r"]))
    assert alive > dead
    assert store.fence_leases() == [("r", 2, alive)]
    assert store.run(try_acquire(provider, holder(3), ["r"])) == "r"  # this one is live


def test_tokens_keep_growing_after_reconnecting(store: StoreUnderTest) -> None:
    with store.connect() as conn:
        [(_, before)] = backends.run(conn, StoreFencing().acquire(holder(1), ["r"]))
        backends.run(conn, StoreFencing().release(held(holder(1))))
    with store.connect() as conn:  # a new connection, a new provider: a restarted daemon
        [(_, after)] = backends.run(conn, StoreFencing().acquire(holder(2), ["r"]))
    assert after > before


def test_a_fencing_counter_never_decreases(store: StoreUnderTest) -> None:
    token = only(store.run(StoreFencing().acquire(holder(1), ["r"])), "r")
    with pytest.raises(store.database_errors()):
        store.execute("UPDATE effectus_fencing_counters SET last_token = 0")
    assert store.execute("SELECT last_token FROM effectus_fencing_counters") == [(token,)]


def test_store_fencing_is_durable_and_monotonic() -> None:
    provider = StoreFencing()
    assert provider.guarantee is FencingGuarantee.DURABLE_MONOTONIC
    assert provider.status.value == "propagated"


def _without_queries(operation: Operation[Grants]) -> Grants:
    try:
        query = next(operation)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    raise AssertionError(f"the in-memory provider ran a query: {query}")


def test_memory_provider_is_advisory_and_per_process() -> None:
    first, second = MemoryFencing(), MemoryFencing()
    assert _without_queries(first.acquire(holder(1), ["r"])) == (("r", 1),)
    assert _without_queries(second.acquire(holder(2), ["r"])) == (("r", 1),)  # nothing shared
    with pytest.raises(FenceBusy):
        _without_queries(first.acquire(holder(3), ["r"]))
    _without_queries(first.release(held(holder(1))))  # type: ignore[arg-type]
    assert _without_queries(first.acquire(holder(3), ["r"])) == (("r", 2),)
    assert first.status.value == "local_lock_only"
    assert first.guarantee is FencingGuarantee.LOCAL_ADVISORY


# -- fencing in the write-ahead -----------------------------------------------------------------


async def test_the_write_ahead_takes_tokens_and_a_held_resource_sends_nothing(
    store: StoreUnderTest,
) -> None:
    first_saga = store.submit(serial_plan("f", ["fenced"]), "x-1")  # both fence "res:1"
    second_saga = store.submit(serial_plan("f", ["fenced"]), "x-2")
    daemon = await store.dispatch_store()
    claims = sorted(await daemon.claim({"dest": 10}), key=lambda c: c.dispatch_id)
    assert [c.saga_id for c in claims] == [first_saga, second_saga]
    assert [c.fencing_resources for c in claims] == [("res:1",), ("res:1",)]

    ready, busy = await daemon.write_ahead(claims)
    assert [(w.claim, w.fencing_status) for w in ready] == [(claims[0], "propagated")]
    token = only(ready[0].grants, "res:1")
    assert [(b.dispatch_id, b.outcome, b.cause.settled_by) for b in busy] == [
        (claims[1].dispatch_id, OutcomeClass.RETRYABLE, "guard")
    ]
    first = dispatch_in(store.view(first_saga), "s1")
    assert first["grants"] == [{"resource": "res:1", "token": token}]
    assert first["attempts"][0]["grants"] == [{"resource": "res:1", "token": token}]
    assert first["attempts"][0]["fencing_status"] == "propagated"
    assert dispatch_in(store.view(second_saga), "s1")["attempts"][0]["sent_at"] is None
    assert store.fence_leases() == [("res:1", claims[0].dispatch_id, token)]

    assert (await daemon.record(busy)).applied == 1
    waiting = dispatch_in(store.view(second_saga), "s1")
    assert waiting["state"] == "retry_wait"
    assert "held by another live dispatch" in waiting["attempts"][0]["error"]
    assert waiting["attempts"][0]["settled_by"] == "guard"

    await daemon.record([completion(claims[0], OutcomeClass.SUCCESS)])
    assert store.fence_leases() == []  # released with the outcome
    store.make_due()
    [retried] = await daemon.claim({"dest": 10})
    assert (retried.saga_id, retried.attempt) == (second_saga, 2)
    assert only((await send(daemon, retried)).grants, "res:1") > token


async def test_a_reclaim_gives_back_the_expired_holders_fence(
    store: StoreUnderTest,
) -> None:
    saga = store.submit(serial_plan("f", ["fenced"]), "x")
    zombie = await store.dispatch_store(owner="zombie")
    old = await send(zombie, (await zombie.claim({"dest": 1}))[0])
    zombies = only(old.grants, "res:1")
    store.expire_leases()
    daemon = await store.dispatch_store(owner="daemon")
    assert (await daemon.reclaim_expired()).applied == 1
    assert store.fence_leases() == []  # the reclaim gave the zombie's fence back
    store.make_due()
    new = await send(daemon, (await daemon.claim({"dest": 1}))[0])
    token = only(new.grants, "res:1")
    assert new.claim.attempt == 2 and token > zombies
    assert dispatch_in(store.view(saga), "s1")["grants"] == [{"resource": "res:1", "token": token}]


async def test_memory_fencing_in_the_write_ahead_is_local_only(store: StoreUnderTest) -> None:
    saga = store.submit(serial_plan("f", ["fenced"]), "x")
    daemon = await store.dispatch_store(fencing=MemoryFencing())
    ahead = await send(daemon, (await daemon.claim({"dest": 1}))[0])
    assert (ahead.grants, ahead.fencing_status) == ((("res:1", 1),), "local_lock_only")
    assert dispatch_in(store.view(saga), "s1")["attempts"][0]["fencing_status"] == (
        "local_lock_only"
    )
    assert store.execute("SELECT count(*) FROM effectus_fencing_counters") == [(0,)]


# -- waiting for a busy resource is not an attempt of the retry budget --------------------------


async def busy_round(store: StoreUnderTest, daemon: DispatchStore, saga: str) -> None:
    """One more round of the waiting saga: due, claimed, found busy, recorded (sent nothing)."""
    store.make_due()
    [claim] = await daemon.claim({"dest": 10})
    assert claim.saga_id == saga
    ready, busy = await daemon.write_ahead([claim])
    assert ready == [] and [b.dispatch_id for b in busy] == [claim.dispatch_id]
    assert (await daemon.record(busy)).applied == 1


async def test_a_fence_wait_outlasts_the_retry_budget_and_goes_once_released(
    store: StoreUnderTest,
) -> None:
    holder_saga = store.submit(serial_plan("f", ["fenced"]), "x-1")  # both fence "res:1"
    waiter = store.submit(serial_plan("f", ["fenced"]), "x-2")
    daemon = await store.dispatch_store()
    first, second = sorted(await daemon.claim({"dest": 10}), key=lambda c: c.dispatch_id)
    assert first.saga_id == holder_saga
    held_with = only((await send(daemon, first)).grants, "res:1")  # held until recorded
    await daemon.record((await daemon.write_ahead([second]))[1])

    rounds = 2 * RETRY["max_attempts"]  # more busy rounds than the verb has attempts
    for _ in range(rounds - 1):
        await busy_round(store, daemon, waiter)
    waiting = dispatch_in(store.view(waiter), "s1")
    assert (waiting["state"], waiting["attempt"]) == ("retry_wait", rounds)
    assert all("nothing was sent" in a["error"] for a in waiting["attempts"])
    assert all(a["sent_at"] is None for a in waiting["attempts"])
    assert store.view(waiter)["state"] == "running"

    await daemon.record([completion(first, OutcomeClass.SUCCESS)])  # gives res:1 back
    store.make_due()
    [claim] = await daemon.claim({"dest": 10})
    assert (claim.saga_id, claim.attempt) == (waiter, rounds + 1)
    # the pipeline's pre-send budget check counts only attempts that could have been sent
    assert (claim.fence_waits, claim.budget_spent) == (rounds, False)
    assert only((await send(daemon, claim)).grants, "res:1") > held_with
    await daemon.record([completion(claim, OutcomeClass.SUCCESS)])
    assert store.view(waiter)["state"] == "completed"


async def test_a_fence_wait_past_its_bound_blocks_naming_the_holder(
    store: StoreUnderTest,
) -> None:
    holder_saga = store.submit(serial_plan("f", ["fenced"]), "x-1")
    waiter = store.submit(serial_plan("f", ["fenced"]), "x-2")
    daemon = await store.dispatch_store(owner="daemon-h")
    first, second = sorted(await daemon.claim({"dest": 10}), key=lambda c: c.dispatch_id)
    await send(daemon, first)
    await daemon.record((await daemon.write_ahead([second]))[1])
    assert dispatch_in(store.view(waiter), "s1")["state"] == "retry_wait"

    # the wait began longer ago than fencing.wait_limit (by default at least five minutes)
    store.execute(
        "UPDATE effectus_saga_outbox SET fence_wait_since = fence_wait_since - "
        f"{store.seconds_sql(3600)} WHERE saga_id = {'?' if store.sqlite else '%s'}",
        (waiter,),
    )
    await busy_round(store, daemon, waiter)
    view = store.view(waiter)
    assert dispatch_in(view, "s1")["state"] == "blocked_fence"
    assert view["state"] == "blocked_fence"
    reason = view["stop_reason"]
    assert f"dispatch {first.dispatch_id} of saga {holder_saga}" in reason
    assert "lease owner daemon-h" in reason and "nothing was sent" in reason
    assert "res:1" not in reason  # the resource's text may carry argument values


# -- one claim's failing write-ahead settles that claim only ------------------------------------


async def test_a_claim_whose_write_ahead_fails_leaves_the_others_sent(
    store: StoreUnderTest,
) -> None:
    sagas, poison = sagas_with_one_unfenceable(store)
    daemon = await store.dispatch_store()
    claims = sorted(await daemon.claim({"dest": 10}), key=lambda c: c.dispatch_id)
    assert [c.saga_id for c in claims] == sagas

    ready, not_sent = await daemon.write_ahead(claims)
    assert [w.claim.saga_id for w in ready] == [sagas[0], sagas[2]]
    assert [(c.dispatch_id, c.outcome, c.cause.settled_by) for c in not_sent] == [
        (claims[1].dispatch_id, OutcomeClass.RETRYABLE, "guard")
    ]
    assert not_sent[0].cause is Cause.WRITE_AHEAD_FAILED
    assert poison not in (not_sent[0].error or "")
    for saga in (sagas[0], sagas[2]):
        assert dispatch_in(store.view(saga), "s1")["attempts"][0]["sent_at"] is not None

    assert (await daemon.record(not_sent)).applied == 1
    failed = dispatch_in(store.view(sagas[1]), "s1")
    assert failed["state"] == "retry_wait" and failed["attempts"][0]["sent_at"] is None
    assert "write-ahead failed" in failed["attempts"][0]["error"]

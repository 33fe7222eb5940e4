"""The Python client's reads on every store: typed views, lookups by id, prefix and execution
id, typed lists, and ``wait`` with ``until`` — woken by the store's notification on PostgreSQL
(the poll interval is made longer than the timeout, so only a notification can wake it) and by
polling on SQLite."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter

import pytest

from effectusd import (
    AmbiguousSaga,
    AsyncClient,
    DispatchState,
    OutcomeClass,
    SagaNotFound,
    SagaState,
    SagaSummary,
    SagaView,
    StepState,
    WaitTimeout,
    WaitUnreachable,
)
from tests.conformance.support import StoreUnderTest, step
from tests.support.harness import serial_plan

PLAN = serial_plan("checkout", ["pay", "pay"])
WAIT_S = 20.0  # far longer than a transition takes
WOKEN_S = WAIT_S / 2  # a wait not woken sleeps until WAIT_S before it looks again


def notified_only(store: StoreUnderTest, client: object) -> None:
    """On PostgreSQL, look again only when notified: a missed notification means a timeout."""
    if not store.sqlite:
        client.backend.notifications.poll_interval_s = 10 * WAIT_S  # type: ignore[attr-defined]


async def test_get_returns_a_typed_view_with_enums(store: StoreUnderTest) -> None:
    saga = store.submit(PLAN, "order-1", facts={})
    daemon = await store.dispatch_store()
    await step(daemon, OutcomeClass.SUCCESS, result={"id": 1})

    view = store.client().get(saga)

    assert isinstance(view, SagaView)
    assert view.state is SagaState.RUNNING
    assert [s.state for s in view.steps] == [StepState.SUCCEEDED, StepState.IN_PROGRESS]
    first = view.step("s1").dispatches[0]
    assert first.state is DispatchState.SUCCEEDED
    assert first.attempts[0].outcome is OutcomeClass.SUCCESS
    assert view.step("s1").result == {"id": 1}
    assert view.created_at.utcoffset() is not None  # a point in time, not a string
    assert view.model_dump(mode="json") == store.view(saga)  # what sagas show --json prints


async def test_lookups_by_prefix_and_by_execution_id(store: StoreUnderTest) -> None:
    client = store.client()
    target = store.submit(PLAN, "order-1")
    refund = store.submit(serial_plan("refund", ["pay"]), "order-1")

    assert client.get(target[:20]).saga_id == target  # type: ignore[union-attr]
    assert client.get(target.upper()).saga_id == target  # type: ignore[union-attr]
    assert client.get(execution_id="order-1", plan_id="checkout").saga_id == target  # type: ignore[union-attr]
    assert client.get(execution_id="order-2", plan_id="checkout") is None
    assert client.get("f" * 65) is None and client.get("not-hex") is None
    with pytest.raises(AmbiguousSaga) as ambiguous:
        client.get(execution_id="order-1")
    assert sorted(ambiguous.value.matches) == sorted([target, refund])
    with pytest.raises(TypeError, match="saga_id"):
        client.get()


async def test_an_ambiguous_prefix_is_a_typed_error(store: StoreUnderTest) -> None:
    # Seventeen ids over sixteen hex digits: two of them share their first digit.
    ids = [store.submit(PLAN, f"order-{n}") for n in range(17)]
    digit, count = Counter(saga[0] for saga in ids).most_common(1)[0]
    assert count >= 2

    with pytest.raises(AmbiguousSaga, match=f"prefix {digit}") as raised:
        await AsyncClient(store.config, database_url=store.url).get(digit)

    assert set(raised.value.matches) == {saga for saga in ids if saga.startswith(digit)}
    assert isinstance(raised.value, LookupError)


async def test_list_returns_typed_summaries(store: StoreUnderTest) -> None:
    first = store.submit(PLAN, "order-1")
    second = store.submit(serial_plan("refund", ["pay"]), "order-2")

    rows = store.client().list()
    assert all(isinstance(row, SagaSummary) for row in rows)
    assert [row.saga_id for row in rows] == [second, first]
    assert [r.saga_id for r in store.client().list(state=SagaState.RUNNING, plan_id="refund")] == [
        second
    ]
    assert await AsyncClient(store.config, database_url=store.url).list(state="completed") == []


async def test_wait_until_a_state_wakes_when_the_saga_gets_there(store: StoreUnderTest) -> None:
    client = AsyncClient(store.config, database_url=store.url)
    notified_only(store, client)
    saga = store.submit(PLAN, "order-1")
    daemon = await store.dispatch_store()
    looked = asyncio.Event()

    def completed(view: SagaView) -> bool:
        looked.set()  # the wait is listening and has read the saga once
        return view.state is SagaState.COMPLETED

    waiting = asyncio.create_task(client.wait(saga, WAIT_S, until=completed))
    await looked.wait()
    await step(daemon, OutcomeClass.SUCCESS)
    await step(daemon, OutcomeClass.SUCCESS)
    changed = time.monotonic()
    view = await waiting

    assert view.state is SagaState.COMPLETED and view.finished_at is not None
    assert time.monotonic() - changed < WOKEN_S


async def test_the_sync_wait_wakes_alike(store: StoreUnderTest) -> None:
    client = store.client()
    notified_only(store, client)
    saga = store.submit(serial_plan("p", ["pay"]), "order-1")
    daemon = await store.dispatch_store()
    looked = threading.Event()

    def watch(view: SagaView) -> bool:
        looked.set()
        return view.state.is_terminal or view.state.is_blocked

    waiting = asyncio.create_task(asyncio.to_thread(client.wait, saga, WAIT_S, until=watch))
    assert await asyncio.to_thread(looked.wait, WAIT_S)
    await step(daemon, OutcomeClass.UNKNOWN)  # at most once: blocked at once
    changed = time.monotonic()

    assert (await waiting).state is SagaState.BLOCKED_UNKNOWN
    assert time.monotonic() - changed < WOKEN_S


async def test_wait_for_a_set_of_states_and_its_timeout(store: StoreUnderTest) -> None:
    client = store.client()
    saga = store.submit(PLAN, "order-1")

    assert client.wait(saga, 1, until={"running"}).state is SagaState.RUNNING
    with pytest.raises(WaitTimeout, match=r"still running after 0\.1s") as late:
        client.wait(saga, 0.1)  # the default: terminal or blocked
    assert isinstance(late.value, TimeoutError) and late.value.view is not None
    assert late.value.view.saga_id == saga
    with pytest.raises(SagaNotFound):
        client.wait("0" * 64, 1)
    with pytest.raises(ValueError, match="finished"):
        client.wait(saga, 1, until={"finished"})  # no such state


async def test_wait_for_a_state_a_finished_saga_can_never_reach_raises_at_once(
    store: StoreUnderTest,
) -> None:
    client = store.client()
    saga = store.submit(serial_plan("p", ["pay"]), "order-1")
    daemon = await store.dispatch_store()
    await step(daemon, OutcomeClass.SUCCESS, result={"id": 1})
    assert client.get(saga).state is SagaState.COMPLETED  # type: ignore[union-attr]

    # Each would otherwise wait WAIT_S and raise a plain WaitTimeout.
    with pytest.raises(WaitUnreachable, match="finished completed: it will never be compensated"):
        client.wait(saga, WAIT_S, until={"compensated"})
    with pytest.raises(WaitUnreachable) as raised:
        await AsyncClient(store.config, database_url=store.url).wait(
            saga, WAIT_S, until={SagaState.FAILED, SagaState.COMPENSATED}
        )

    assert isinstance(raised.value, WaitTimeout) and raised.value.view is not None
    assert raised.value.view.state is SagaState.COMPLETED
    # what can still hold is answered as before
    assert client.wait(saga, WAIT_S, until={"completed"}).state is SagaState.COMPLETED


async def test_wait_for_a_state_of_a_blocked_saga_keeps_waiting_an_operator_may_move_it(
    store: StoreUnderTest,
) -> None:
    client = store.client()
    saga = store.submit(serial_plan("p", ["pay"]), "order-1")
    daemon = await store.dispatch_store()
    await step(daemon, OutcomeClass.UNKNOWN)  # at most once: blocked

    with pytest.raises(WaitTimeout) as late:
        client.wait(saga, 0.1, until={"completed"})

    assert not isinstance(late.value, WaitUnreachable)
    assert late.value.view is not None and late.value.view.state is SagaState.BLOCKED_UNKNOWN

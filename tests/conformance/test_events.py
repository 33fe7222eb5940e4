"""The timeline: every transition appended, in order, by whom; and nothing ever rewritten."""

from __future__ import annotations

import pytest

from effectusd.core.states import OutcomeClass
from tests.conformance.support import StoreUnderTest, step, timeline, when
from tests.support.harness import serial_plan


async def test_the_timeline_lists_every_transition_in_order(store: StoreUnderTest) -> None:
    saga = store.submit(serial_plan("p", ["pay", "pay_alo"]), "x")
    daemon = await store.dispatch_store(owner="daemon-a")
    await step(daemon, OutcomeClass.SUCCESS)
    await step(daemon, OutcomeClass.UNKNOWN)
    store.make_due()
    await step(daemon, OutcomeClass.SUCCESS)

    view = store.view(saga)
    assert view["state"] == "completed"
    assert timeline(view) == [
        ("saga_submitted", None, None, None, None, "running"),
        ("dispatch_enqueued", "s1", "forward", None, None, "queued"),
        ("dispatch_claimed", "s1", "forward", 1, "queued", "in_flight"),
        ("attempt_settled", "s1", "forward", 1, "in_flight", "succeeded"),
        ("step_state", "s1", None, None, "in_progress", "succeeded"),
        ("step_state", "s2", None, None, "pending", "in_progress"),
        ("dispatch_enqueued", "s2", "forward", None, None, "queued"),
        ("dispatch_claimed", "s2", "forward", 1, "queued", "in_flight"),
        ("attempt_settled", "s2", "forward", 1, "in_flight", "retry_wait"),
        ("dispatch_claimed", "s2", "forward", 2, "retry_wait", "in_flight"),
        ("attempt_settled", "s2", "forward", 2, "in_flight", "succeeded"),
        ("step_state", "s2", None, None, "in_progress", "succeeded"),
        ("saga_state", None, None, None, "running", "completed"),
    ]
    events = view["timeline"]
    assert [e["actor"] for e in events][:3] == ["client", "client", "daemon-a"]
    assert {e["actor"] for e in events if e["kind"] == "attempt_settled"} == {"engine"}
    ids = [e["event_id"] for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    times = [when(e["at"]) for e in events]
    assert times == sorted(times)
    unknown = [e for e in events if e["kind"] == "attempt_settled"][1]
    assert unknown["detail"]["outcome"] == "unknown_outcome"
    assert unknown["detail"]["settled_by"] == "executor"
    claimed = next(e for e in events if e["kind"] == "dispatch_claimed")
    assert set(claimed["detail"]) == {"lease_expires_at"}


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE effectus_saga_events SET actor = 'someone else'",
        "UPDATE effectus_saga_events SET kind = kind",  # even a no-op rewrite
        "DELETE FROM effectus_saga_events",  # rows leave only with their saga
    ],
)
def test_the_timeline_is_append_only(store: StoreUnderTest, statement: str) -> None:
    saga = store.submit(serial_plan("p", ["pay"]), "x")
    before = store.view(saga)["timeline"]
    assert len(before) == 2
    with pytest.raises(store.database_errors(), match=r"append-only|only with their saga"):
        store.execute(statement)
    assert store.view(saga)["timeline"] == before

"""The timeline: every transition appended, in order, by whom; and nothing ever rewritten."""

from __future__ import annotations

import pytest

from effectusd.core.states import OutcomeClass
from effectusd.core.timeline import derived_event_id
from tests.conformance.support import StoreUnderTest, claim_one, dispatch_in, step, timeline, when
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
    stored = [i for i in ids if i > 0]
    assert stored == sorted(stored) and len(set(ids)) == len(ids)
    times = [when(e["at"]) for e in events]
    assert times == sorted(times)
    unknown = [e for e in events if e["kind"] == "attempt_settled"][1]
    assert unknown["detail"]["outcome"] == "unknown_outcome"
    assert unknown["detail"]["settled_by"] == "executor"

    # the claims are the attempt rows, read as timeline entries: none is stored as an event
    assert store.execute(
        "SELECT count(*) FROM effectus_saga_events WHERE kind = 'dispatch_claimed'"
    ) == [(0,)]
    claims = [e for e in events if e["kind"] == "dispatch_claimed"]
    rows = [(a, d) for d in ("s1", "s2") for a in dispatch_in(view, d)["attempts"]]
    assert len(claims) == len(rows) == 3
    p = "?" if store.sqlite else "%s"
    ids_of = dict(
        store.execute(
            f"SELECT effect_id, dispatch_id FROM effectus_saga_outbox WHERE saga_id = {p}", (saga,)
        )
    )
    for claim, (attempt, effect_id) in zip(claims, rows, strict=True):
        assert claim["event_id"] == derived_event_id(ids_of[effect_id], attempt["attempt"])
        assert claim["attempt"] == attempt["attempt"] and claim["actor"] == attempt["lease_owner"]
        assert claim["at"] == attempt["claimed_at"]
        assert claim["detail"] == {"lease_expires_at": attempt["lease_expires_at"]}
    assert store.view(saga)["timeline"] == events  # the same entries, ids included, every read


async def test_a_claim_stored_by_an_earlier_version_shows_once(store: StoreUnderTest) -> None:
    """Claims used to be stored as events: after an upgrade such a saga shows each claim
    once, the stored row, and derives the claims of attempts made since."""
    saga = store.submit(serial_plan("p", ["pay_alo"]), "x")
    daemon = await store.dispatch_store(owner="daemon-a")
    await step(daemon, OutcomeClass.UNKNOWN)
    p = "?" if store.sqlite else "%s"
    store.execute(  # what the earlier claim wrote for attempt 1
        "INSERT INTO effectus_saga_events (saga_id, effect_id, direction, attempt, kind,"
        " from_state, to_state, actor, detail)"
        f" VALUES ({p}, 's1', 'forward', 1, 'dispatch_claimed', 'queued', 'in_flight',"
        f" 'old-daemon', '{{}}')",
        (saga,),
    )
    store.make_due()
    await step(daemon, OutcomeClass.SUCCESS)

    claims = [e for e in store.view(saga)["timeline"] if e["kind"] == "dispatch_claimed"]
    assert [(e["attempt"], e["actor"], e["event_id"] > 0) for e in claims] == [
        (1, "old-daemon", True),
        (2, "daemon-a", False),
    ]


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


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE effectus_saga_attempts SET lease_owner = 'someone else'",
        "UPDATE effectus_saga_attempts SET claimed_at = claimed_at",  # even a no-op rewrite
        "UPDATE effectus_saga_attempts SET lease_expires_at = lease_expires_at",
        "DELETE FROM effectus_saga_attempts",  # rows leave only with their dispatch
    ],
)
async def test_a_claim_on_the_timeline_is_kept_as_a_stored_event_is(
    store: StoreUnderTest, statement: str
) -> None:
    """The claim's timeline entry is its attempt row: what the claim wrote there is guarded as
    the events table's rows are; the columns a settlement writes are not."""
    saga = store.submit(serial_plan("p", ["pay"]), "x")
    daemon = await store.dispatch_store(owner="daemon-a")
    await claim_one(daemon)
    before = store.view(saga)["timeline"]
    assert [e["kind"] for e in before][-1] == "dispatch_claimed"
    with pytest.raises(store.database_errors(), match=r"never rewritten|only with their dispatch"):
        store.execute(statement)
    assert store.view(saga)["timeline"] == before
    store.execute("UPDATE effectus_saga_attempts SET error = 'settlement columns stay writable'")
    store.execute("DELETE FROM effectus_saga_instances")  # prune's way: with the saga
    assert store.execute("SELECT count(*) FROM effectus_saga_attempts") == [(0,)]

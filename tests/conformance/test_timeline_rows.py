"""The settlement and enqueue entries of a timeline, and a chain's step moves, are read from the
attempt and outbox rows (effectusd/core/timeline.py, migrations 10012 and 10015): they are
stored as no event, they read as the
stored events did, a database an earlier version wrote shows each entry once, and the rows
they are read from are kept as the events table keeps its rows."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest

from effectusd.core.next_step import TransitionBuilder
from effectusd.core.states import OutcomeClass
from effectusd.core.timeline import (
    ENQUEUED,
    SETTLED,
    derived_event_id,
)
from effectusd.operator import Resolution, resolve
from tests.conformance.support import (
    StoreUnderTest,
    claim_one,
    completion,
    dispatch_in,
    send,
    step,
    timeline,
    when,
)
from tests.conformance.test_parallel import fan_plan
from tests.support.harness import serial_plan

OPS = "user:ops"


def stored_kinds(store: StoreUnderTest, saga: str) -> Counter[str]:
    p = "?" if store.sqlite else "%s"
    found = store.execute(f"SELECT kind FROM effectus_saga_events WHERE saga_id = {p}", (saga,))
    return Counter(kind for (kind,) in found)


def dispatch_ids(store: StoreUnderTest, saga: str) -> dict[tuple[str, str], int]:
    p = "?" if store.sqlite else "%s"
    found = store.execute(
        f"SELECT effect_id, direction, dispatch_id FROM effectus_saga_outbox WHERE saga_id = {p}",
        (saga,),
    )
    return {(effect, direction): dispatch_id for effect, direction, dispatch_id in found}


async def test_settlements_and_enqueues_are_read_from_their_rows_not_stored(
    store: StoreUnderTest,
) -> None:
    """Forward steps, a retry, a reclaim by another daemon, a failure and the compensation it
    starts: every settlement and enqueue is an entry read from its row, with the row's
    facts; only the step and saga moves are stored events."""
    saga = store.submit(serial_plan("p", ["pay", "pay_alo", "pay"], {"s1": "undo"}), "x")
    daemon = await store.dispatch_store(owner="daemon-a")
    await step(daemon, OutcomeClass.SUCCESS)
    await step(daemon, OutcomeClass.UNKNOWN)  # at_least_once: retried
    store.make_due()
    await send(daemon, await claim_one(daemon))
    store.expire_leases()
    reclaimer = await store.dispatch_store(owner="daemon-b")
    assert (await reclaimer.reclaim_expired()).applied == 1  # written ahead: unknown again
    store.make_due()
    await step(daemon, OutcomeClass.SUCCESS)
    await step(daemon, OutcomeClass.PERMANENT)  # s3 fails: s1 is compensated
    await step(daemon, OutcomeClass.SUCCESS)

    view = store.view(saga)
    assert view["state"] == "compensated"
    # Stored: s3's failure and s1's compensation starting (after the saga's move, which is
    # stored). Read from rows (migration 10015): s1 and s2 succeeding, s2 and s3 starting, and
    # s1 compensated, each with the settlement that made it.
    assert stored_kinds(store, saga) == {"saga_submitted": 1, "step_state": 2, "saga_state": 2}
    moves = [
        (e["effect_id"], e["from_state"], e["to_state"], e["event_id"] < 0)
        for e in view["timeline"]
        if e["kind"] == "step_state"
    ]
    assert moves == [
        ("s1", "in_progress", "succeeded", True),
        ("s2", "pending", "in_progress", True),
        ("s2", "in_progress", "succeeded", True),
        ("s3", "pending", "in_progress", True),
        ("s3", "in_progress", "failed", False),
        ("s1", "succeeded", "compensating", False),
        ("s1", "compensating", "compensated", True),
    ]
    ids = dispatch_ids(store, saga)
    entries = [e for e in view["timeline"] if e["kind"] in (SETTLED, ENQUEUED)]
    enqueued = [
        (e["effect_id"], e["direction"], e["actor"]) for e in entries if e["kind"] == ENQUEUED
    ]
    assert enqueued == [
        ("s1", "forward", "client"),
        ("s2", "forward", "engine"),
        ("s3", "forward", "engine"),
        ("s1", "compensation", "engine"),
    ]
    settled = [
        (e["effect_id"], e["attempt"], e["to_state"], e["actor"])
        for e in entries
        if e["kind"] == SETTLED
    ]
    assert settled == [
        ("s1", 1, "succeeded", "engine"),
        ("s2", 1, "retry_wait", "engine"),
        ("s2", 2, "retry_wait", "daemon-b"),  # the reclaim's daemon
        ("s2", 3, "succeeded", "engine"),
        ("s3", 1, "failed_permanent", "engine"),
        ("s1", 1, "succeeded", "engine"),
    ]
    attempts = {
        (d["direction"], s["effect_id"], a["attempt"]): a
        for s in view["steps"]
        for d in s["dispatches"]
        for a in d["attempts"]
    }
    timeline_entries = view["timeline"]
    for index, entry in enumerate(timeline_entries):
        key = (entry["effect_id"], entry["direction"])
        if entry["kind"] == ENQUEUED:
            assert entry["event_id"] == derived_event_id(ids[key], 0, ENQUEUED)
            dispatch = dispatch_in(view, *key)
            assert entry["detail"] == {
                "args_hash": dispatch["args_hash"],
                "idempotency_key": dispatch["idempotency_key"],
            }
            before = timeline_entries[index - 1]  # what it was written with
            assert before["kind"] in ("saga_submitted", "step_state", ENQUEUED)
            assert entry["at"] == before["at"]
        elif entry["kind"] == SETTLED:
            attempt = attempts[(entry["direction"], entry["effect_id"], entry["attempt"])]
            assert entry["event_id"] == derived_event_id(ids[key], entry["attempt"], SETTLED)
            assert entry["from_state"] == "in_flight" and entry["evidence"] is None
            assert entry["detail"] == {
                "outcome": attempt["outcome"],
                "settled_by": attempt["settled_by"],
                "status_code": attempt["status_code"],
                "error": attempt["error"],
            }
            assert entry["at"] == attempt["completed_at"]
    assert [when(e["at"]) for e in timeline_entries if e["kind"] != "dispatch_claimed"] == sorted(
        when(e["at"]) for e in timeline_entries if e["kind"] != "dispatch_claimed"
    )
    ids_read = [e["event_id"] for e in timeline_entries]
    assert len(set(ids_read)) == len(ids_read)
    assert store.view(saga)["timeline"] == timeline_entries  # the same on every read


async def test_a_second_settlement_of_an_attempt_is_stored_and_what_follows_is_read(
    store: StoreUnderTest,
) -> None:
    """An operator's resolution settles an attempt its call settled already: that settlement
    is a stored event (with the operator's evidence); the next step's enqueue, made by the
    operator, is read from its outbox row with the operator as its actor."""
    saga = store.submit(serial_plan("p", ["pay", "pay"]), "x")
    daemon = await store.dispatch_store()
    await step(daemon, OutcomeClass.UNKNOWN)  # at_most_once: blocked
    store.run(
        resolve(
            saga,
            "s1",
            Resolution.COMMITTED,
            registry=store.registry,
            actor=OPS,
            evidence="the ledger shows it",
        )
    )
    entries = store.view(saga)["timeline"]
    settled = [(e["from_state"], e["to_state"], e["actor"], e["evidence"], e["event_id"] > 0)
               for e in entries if e["kind"] == SETTLED]  # fmt: skip
    assert settled == [
        ("in_flight", "blocked_unknown", "engine", None, False),
        ("blocked_unknown", "succeeded", OPS, "the ledger shows it", True),
    ]
    assert [
        (e["effect_id"], e["actor"], e["event_id"] > 0) for e in entries if e["kind"] == ENQUEUED
    ] == [
        ("s1", "client", False),
        ("s2", OPS, False),
    ]
    assert timeline({"timeline": entries})[-6:] == [
        ("operator_resolve", "s1", "forward", 1, "blocked_unknown", "succeeded"),
        (SETTLED, "s1", "forward", 1, "blocked_unknown", "succeeded"),
        ("step_state", "s1", None, None, "in_progress", "succeeded"),
        ("saga_state", None, None, None, "blocked_unknown", "running"),  # resumed, then on
        ("step_state", "s2", None, None, "pending", "in_progress"),
        (ENQUEUED, "s2", "forward", None, None, "queued"),
    ]


async def test_a_saga_an_earlier_version_wrote_shows_each_entry_once(
    store: StoreUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Settled by an earlier version's engine (every entry of its transitions a stored event)
    until its second step's first answer, then by this one: the timeline reads as one written
    by this version throughout, each entry once (the stored events of before, the rows'
    entries since). The fixture database (``test_timeline_fixture.py``) is a whole saga so."""
    plan = serial_plan("p", ["pay", "pay_alo"])
    old = store.submit(plan, "old")
    with monkeypatch.context() as earlier:
        earlier.setattr(TransitionBuilder, "carry_in_rows", False)
        daemon = await store.dispatch_store()
        await step(daemon, OutcomeClass.SUCCESS)
        await step(daemon, OutcomeClass.UNKNOWN)
    assert stored_kinds(store, old)[ENQUEUED] == 1 and stored_kinds(store, old)[SETTLED] == 2
    store.make_due()
    await step(daemon, OutcomeClass.SUCCESS)
    new = store.submit(plan, "new")
    for outcome in (OutcomeClass.SUCCESS, OutcomeClass.UNKNOWN, OutcomeClass.SUCCESS):
        store.make_due()
        await step(daemon, outcome)

    entries = store.view(old)["timeline"]
    assert timeline({"timeline": entries}) == timeline(store.view(new))
    assert [
        (e["kind"], e["attempt"], e["event_id"] > 0)
        for e in entries
        if e["kind"] in (SETTLED, ENQUEUED)
    ] == [
        (ENQUEUED, None, False),  # the submit's, on its row
        (SETTLED, 1, True),
        (ENQUEUED, None, True),
        (SETTLED, 1, True),
        (SETTLED, 2, False),  # settled since
    ]
    assert stored_kinds(store, new)[ENQUEUED] == stored_kinds(store, new)[SETTLED] == 0


# What the version before 10015 wrote: settlements and enqueues on their rows, every step
# move stored (nothing rides on a settlement).
NOTHING_BESIDE_A_SETTLEMENT = property(lambda _: False, lambda _, value: None)


async def test_a_saga_whose_step_moves_an_earlier_version_stored_reads_each_move_once(
    store: StoreUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Written by an earlier version through its first step, then by this one (migration 10015):
    the timeline reads as one this version wrote throughout, each step move once: stored
    before, read from the rows since."""
    plan = serial_plan("p", ["pay", "pay", "pay"])
    with monkeypatch.context() as earlier:
        earlier.setattr(
            TransitionBuilder, "beside_settlement", NOTHING_BESIDE_A_SETTLEMENT, raising=False
        )
        old = store.submit(plan, "old")
        daemon = await store.dispatch_store()
        await step(daemon, OutcomeClass.SUCCESS)
    assert stored_kinds(store, old)["step_state"] == 2  # s1 succeeded, s2 started
    for _ in range(2):
        await step(daemon, OutcomeClass.SUCCESS)
    new = store.submit(plan, "new")
    for _ in range(3):
        await step(daemon, OutcomeClass.SUCCESS)

    entries = store.view(old)["timeline"]
    assert store.view(old)["state"] == store.view(new)["state"] == "completed"
    assert timeline({"timeline": entries}) == timeline(store.view(new))
    moves = [(e["effect_id"], e["to_state"], e["event_id"] > 0) for e in entries
             if e["kind"] == "step_state"]  # fmt: skip
    assert moves == [
        ("s1", "succeeded", True),
        ("s2", "in_progress", True),
        ("s2", "succeeded", False),  # read from the rows since
        ("s3", "in_progress", False),
        ("s3", "succeeded", False),
    ]
    assert stored_kinds(store, new)["step_state"] == 0


def attempt_updates() -> list[str]:
    return [
        "UPDATE effectus_saga_attempts SET error = 'rewritten'",
        "UPDATE effectus_saga_attempts SET outcome = outcome",  # even a no-op rewrite
        "UPDATE effectus_saga_attempts SET settled_to = 'canceled'",
        "UPDATE effectus_saga_attempts SET settled_actor = 'someone else'",
        "UPDATE effectus_saga_attempts SET completed_at = completed_at",
        "UPDATE effectus_saga_outbox SET enqueued_by = 'someone else'",
        "UPDATE effectus_saga_outbox SET idempotency_key = idempotency_key",
        "UPDATE effectus_saga_outbox SET created_at = created_at",
        "UPDATE effectus_saga_attempts SET settled_step = settled_step",
        "UPDATE effectus_saga_outbox SET started_from = started_from",
        "UPDATE effectus_saga_outbox SET enqueued_after = enqueued_after",
        "DELETE FROM effectus_saga_outbox",  # rows leave only with their saga
    ]


@pytest.mark.parametrize("statement", attempt_updates())
async def test_a_settlement_or_enqueue_on_the_timeline_is_kept_as_a_stored_event_is(
    store: StoreUnderTest, statement: str
) -> None:
    saga = store.submit(serial_plan("p", ["pay", "pay"]), "x")
    daemon = await store.dispatch_store()
    await step(daemon, OutcomeClass.SUCCESS)
    before = store.view(saga)["timeline"]
    assert [e["kind"] for e in before].count(SETTLED) == 1
    with pytest.raises(store.database_errors(), match=r"never rewritten|only with their saga"):
        store.execute(statement)
    assert store.view(saga)["timeline"] == before
    store.execute("UPDATE effectus_saga_outbox SET state = state, updated_at = updated_at")
    store.execute("DELETE FROM effectus_saga_instances")  # prune's way: with the saga
    assert store.execute("SELECT count(*) FROM effectus_saga_outbox") == [(0,)]


class EverySlot:
    """A daemon with room for every dispatch: the recorder claims each next step it writes
    (where the store can: PostgreSQL)."""

    def take(self, destination: str, may_wait: bool) -> bool:
        return True


async def test_a_timeline_never_goes_back_in_time(store: StoreUnderTest) -> None:
    """A saga through success, a retry, a failure and its compensation, each next dispatch
    claimed where it is written wherever the store can: no entry of its timeline is earlier
    than the one above it (a claim made in the record transaction once took the
    transaction's start, before the settlement and enqueue above it)."""
    saga = store.submit(serial_plan("p", ["pay", "pay_alo", "pay"], {"s1": "undo"}), "x")
    daemon = await store.dispatch_store()
    outcomes = [OutcomeClass.SUCCESS, OutcomeClass.RETRYABLE, OutcomeClass.SUCCESS]
    outcomes += [OutcomeClass.PERMANENT, OutcomeClass.SUCCESS]
    claimed: list[Any] = []
    in_record = 0
    for outcome in outcomes:
        if claimed:
            claim = claimed.pop()
            in_record += 1
        else:
            store.make_due()
            claim = await claim_one(daemon)
        if not claim.written_ahead:
            await send(daemon, claim)
        report = await daemon.record([completion(claim, outcome)], EverySlot())
        assert report.applied == 1
        claimed.extend(report.claimed)

    view = store.view(saga)
    assert view["state"] == "compensated"
    assert in_record == (0 if store.sqlite else 3)  # s2, s3 and the compensation of s1
    assert_never_back_in_time(view)


async def test_a_resolved_saga_timeline_never_goes_back_in_time(store: StoreUnderTest) -> None:
    """A block, the operator's resolution and the step it enqueued, claimed and recorded."""
    saga = store.submit(serial_plan("p", ["pay", "pay"]), "x")
    daemon = await store.dispatch_store()
    await step(daemon, OutcomeClass.UNKNOWN)  # at_most_once: blocked
    resolution = resolve(
        saga, "s1", Resolution.COMMITTED, registry=store.registry, actor=OPS, evidence="seen"
    )
    store.run(resolution)
    await step(daemon, OutcomeClass.SUCCESS)
    view = store.view(saga)
    assert view["state"] == "completed"
    assert_never_back_in_time(view)


async def test_a_parallel_saga_timeline_never_goes_back_in_time(store: StoreUnderTest) -> None:
    """hold, then a, b and c together, then join: each transition claims what it enqueues
    wherever the store can, so claims of siblings interleave with their settlements."""
    saga = store.submit(fan_plan(), "x")
    daemon = await store.dispatch_store()
    due = [await claim_one(daemon)]
    while due:
        claims, due = due, []
        for claim in claims:
            if not claim.written_ahead:
                await send(daemon, claim)
        for claim in claims:
            report = await daemon.record([completion(claim, OutcomeClass.SUCCESS)], EverySlot())
            due.extend(report.claimed)
        due.extend(await daemon.claim({"dest": 10}))
    view = store.view(saga)
    assert view["state"] == "completed"
    assert_never_back_in_time(view)


def assert_never_back_in_time(view: dict[str, Any]) -> None:
    entries = [(e["kind"], e["effect_id"], when(e["at"])) for e in view["timeline"]]
    for above, below in itertools.pairwise(entries):
        assert above[2] <= below[2], (above, below)

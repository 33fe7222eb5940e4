"""Every outcome's transition (docs/design.md section 6), guarded completions and compensation
order, driven through the DispatchStore with outcomes the test chooses."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from effectusd.core.states import Cause, Direction, OutcomeClass
from effectusd.core.transition import Completion
from effectusd.store.dispatch import DispatchStore
from tests.conformance.support import (
    StoreUnderTest,
    claim_one,
    completion,
    dispatch_in,
    has_dispatch,
    send,
    step,
    step_states,
    timeline,
    when,
)
from tests.support.harness import serial_plan

SUCCESS = OutcomeClass.SUCCESS
RETRYABLE = OutcomeClass.RETRYABLE
PERMANENT = OutcomeClass.PERMANENT
UNKNOWN = OutcomeClass.UNKNOWN
STALE = OutcomeClass.STALE_FENCE


# -- guarded completions ----------------------------------------------------------------------


async def test_a_reclaim_that_read_the_attempt_unsent_settles_it_unknown_once_it_was_sent(
    store: StoreUnderTest,
) -> None:
    """The reclaim reads expired leases (sent or not) before it locks them; a write-ahead
    that started while the lease was live can commit in between. The attempt as locked
    decides: written ahead means it may have been sent, so an at_most_once dispatch blocks
    instead of being retried as known not committed."""
    saga = store.submit(serial_plan("p", ["pay"]), "x")
    holder = await store.dispatch_store(owner="holder")
    claim = await claim_one(holder)
    await send(holder, claim)
    store.expire_leases()
    reclaimer = await store.dispatch_store(owner="reclaimer")
    [read_now] = await reclaimer.expired_completions()
    assert read_now.outcome is UNKNOWN
    # what the same read returned had it run just before the write-ahead committed
    read_before = replace(
        read_now, outcome=RETRYABLE, error="lease expired before anything was sent"
    )

    report = await reclaimer.record([read_before])
    assert report.applied == 1
    view = store.view(saga)
    dispatch = dispatch_in(view, "s1")
    assert dispatch["state"] == "blocked_unknown" and view["state"] == "blocked_unknown"
    [attempt] = dispatch["attempts"]
    assert attempt["outcome"] == "unknown_outcome" and attempt["settled_by"] == "reclaim"
    assert "may have been sent" in attempt["error"]


async def test_a_completion_for_a_superseded_attempt_is_kept_as_a_late_completion(
    store: StoreUnderTest,
) -> None:
    saga = store.submit(serial_plan("p", ["pay_alo"]), "x")
    zombie = await store.dispatch_store(owner="zombie")
    first = await claim_one(zombie)
    await send(zombie, first)
    store.expire_leases()
    daemon = await store.dispatch_store(owner="daemon")
    assert (await daemon.reclaim_expired()).applied == 1
    store.make_due()
    second = await claim_one(daemon)
    await send(daemon, second)
    before = store.view(saga)

    report = await zombie.record(
        [completion(first, SUCCESS, result={"late": True}, error="too late")]
    )
    assert (report.applied, report.late, report.dropped) == (0, 1, 0)
    after = store.view(saga)
    dispatch = dispatch_in(after, "s1")
    assert (dispatch["state"], dispatch["attempt"]) == ("in_flight", 2)
    assert step_states(after) == step_states(before) == {"s1": "in_progress"}
    assert after["state"] == "running" and after["timeline"] == before["timeline"]
    attempt_1 = dispatch["attempts"][0]
    assert attempt_1["outcome"] == "unknown_outcome"  # what the reclaim settled stays
    assert attempt_1["late"] is True
    assert (attempt_1["late_outcome"], attempt_1["late_status_code"]) == ("success", 200)
    assert attempt_1["late_at"] is not None
    assert dispatch["attempts"][1]["late"] is False

    # the current holder's answer is the one that counts
    report = await daemon.record([completion(second, SUCCESS, result={"n": 2})])
    assert report.applied == 1
    assert store.view(saga)["state"] == "completed"
    assert store.view(saga)["steps"][0]["result"] == {"n": 2}


async def test_a_completion_with_a_changed_token_changes_nothing(store: StoreUnderTest) -> None:
    saga = store.submit(serial_plan("p", ["pay"]), "x")
    daemon = await store.dispatch_store()
    claim = await claim_one(daemon)
    await send(daemon, claim)
    forged = completion(claim, PERMANENT, lease_token=str(uuid.uuid4()))
    report = await daemon.record([forged])
    assert (report.applied, report.late) == (0, 1)
    view = store.view(saga)
    assert dispatch_in(view, "s1")["state"] == "in_flight" and view["state"] == "running"
    [attempt] = dispatch_in(view, "s1")["attempts"]
    assert (attempt["outcome"], attempt["late"], attempt["late_outcome"]) == (
        None,
        True,
        "permanent_failure",
    )
    # the same completion twice: the second finds the attempt settled and changes nothing
    answer = completion(claim, SUCCESS)
    assert (await daemon.record([answer])).applied == 1
    repeat = await daemon.record([answer])
    assert (repeat.applied, repeat.late, repeat.dropped) == (0, 0, 1)
    assert timeline(store.view(saga), "attempt_settled") == [
        ("attempt_settled", "s1", "forward", 1, "in_flight", "succeeded")
    ]


async def test_the_late_answer_of_the_attempt_that_blocked_settles_the_dispatch(
    store: StoreUnderTest,
) -> None:
    saga = store.submit(serial_plan("p", ["pay", "pay"]), "x")
    zombie = await store.dispatch_store(owner="zombie")
    claim = await claim_one(zombie)
    await send(zombie, claim)
    store.expire_leases()
    assert (await zombie.reclaim_expired()).applied == 1
    assert store.view(saga)["state"] == "blocked_unknown"

    report = await zombie.record([completion(claim, SUCCESS, result={"id": 1})])
    assert report.applied == 1
    view = store.view(saga)
    assert view["state"] == "running" and view["stop_reason"] is None
    dispatch = dispatch_in(view, "s1")
    assert (dispatch["state"], dispatch["uncertain_attempt"]) == ("succeeded", None)
    assert dispatch["attempts"][0]["late"] is True
    assert step_states(view) == {"s1": "succeeded", "s2": "in_progress"}
    assert view["steps"][0]["result"] == {"id": 1}


async def test_a_late_answer_that_completes_a_blocked_saga_leaves_no_stop_reason(
    store: StoreUnderTest,
) -> None:
    saga = store.submit(serial_plan("p", ["pay"]), "x")
    zombie = await store.dispatch_store(owner="zombie")
    claim = await claim_one(zombie)
    await send(zombie, claim)
    store.expire_leases()
    await zombie.reclaim_expired()
    assert store.view(saga)["stop_reason"] is not None  # blocked: it may have committed

    await zombie.record([completion(claim, SUCCESS)])
    view = store.view(saga)
    assert (view["state"], view["stop_reason"]) == ("completed", None)


async def test_a_late_answer_that_resumes_compensation_restores_why_compensation_began(
    store: StoreUnderTest,
) -> None:
    saga = store.submit(serial_plan("p", ["pay", "pay"], compensate={"s1": "undo"}), "x")
    daemon = await store.dispatch_store(owner="daemon")
    await step(daemon, SUCCESS)
    await step(daemon, PERMANENT, error="declined")  # s2 fails: compensation of s1 begins
    began = store.view(saga)["stop_reason"]
    zombie = await store.dispatch_store(owner="zombie")
    undo = await claim_one(zombie)
    await send(zombie, undo)
    store.expire_leases()
    await daemon.reclaim_expired()  # the compensation may have run: blocked, never re-sent
    blocked = store.view(saga)
    assert blocked["state"] == "blocked_unknown" and blocked["stop_reason"] != began

    await zombie.record([completion(undo, SUCCESS)])  # its answer arrives after all
    view = store.view(saga)
    assert (view["state"], view["stop_reason"]) == ("compensated", began)


# -- success ------------------------------------------------------------------------------------


async def test_success_enqueues_the_next_step_then_completes_the_saga(
    store: StoreUnderTest,
) -> None:
    saga = store.submit(serial_plan("p", ["pay", "ship"]), "x")
    daemon = await store.dispatch_store()
    await step(daemon, SUCCESS, result={"receipt": "r-1"})

    view = store.view(saga)
    assert view["state"] == "running"
    assert step_states(view) == {"s1": "succeeded", "s2": "in_progress"}
    assert view["steps"][0]["result"] == {"receipt": "r-1"}
    assert dispatch_in(view, "s1")["state"] == "succeeded"
    s2 = dispatch_in(view, "s2")
    assert (s2["state"], s2["attempt"], s2["destination"]) == ("queued", 0, "other")
    assert await daemon.claim({"dest": 10}) == []  # the next step goes to its own destination

    await step(daemon, SUCCESS, destination="other", result=None)
    view = store.view(saga)
    assert view["state"] == "completed" and view["finished_at"] is not None
    assert view["stop_reason"] is None
    assert step_states(view) == {"s1": "succeeded", "s2": "succeeded"}
    assert view["steps"][1]["result"] is None
    # A sequential plan records the order of successes too (compensation reads it back).
    assert [s["succeeded_order"] for s in view["steps"]] == [1, 2]
    assert await daemon.claim({"dest": 10, "other": 10}) == []


# -- retryable ----------------------------------------------------------------------------------


async def test_retryable_waits_with_backoff_then_fails_permanently_when_its_time_is_spent(
    store: StoreUnderTest,
) -> None:
    saga = store.submit(serial_plan("p", ["pay"]), "x")  # max_attempts 3, backoff 10s .. 1m
    daemon = await store.dispatch_store()
    # known not committed: retried past max_attempts (3), which bounds unknown outcomes only
    for attempt, backoff in [(1, 10.0), (2, 20.0), (3, 40.0)]:
        before = datetime.now(UTC)
        await step(daemon, RETRYABLE)
        dispatch = dispatch_in(store.view(saga), "s1")
        assert (dispatch["state"], dispatch["attempt"]) == ("retry_wait", attempt)
        wait = (when(dispatch["next_attempt_at"]) - before).total_seconds()
        assert backoff / 2 - 1 <= wait <= backoff + 1  # jitter spreads the upper half
        assert await daemon.claim({"dest": 10}) == []  # not before its backoff
        store.make_due()

    store.spend_time_budget()  # retry.give_up_after has passed since its first claim
    await step(daemon, RETRYABLE)
    view = store.view(saga)
    dispatch = dispatch_in(view, "s1")
    assert (dispatch["state"], dispatch["attempt"]) == ("failed_permanent", 4)
    assert [a["outcome"] for a in dispatch["attempts"]] == [RETRYABLE.value] * 4
    assert len({a["request_id"] for a in dispatch["attempts"]}) == 4
    assert view["state"] == "failed"  # nothing had succeeded: nothing to undo
    assert "give_up_after" in view["stop_reason"]
    assert step_states(view) == {"s1": "failed"}


async def test_at_least_once_trusts_a_permanent_answer_after_an_uncertain_attempt(
    store: StoreUnderTest,
) -> None:
    # The destination dedupes and replays by key: its definite "no" to attempt 2 is the answer
    # for the key, attempt 1 included. The step failed; compensation starts.
    saga = store.submit(serial_plan("p", ["pay", "pay_alo"], {"s1": "undo"}), "x")
    daemon = await store.dispatch_store()
    await step(daemon, SUCCESS, result={"id": "c-1"})
    await step(daemon, UNKNOWN)  # may have committed; at_least_once retries
    store.make_due()
    await step(daemon, PERMANENT, error="card declined")
    view = store.view(saga)
    assert dispatch_in(view, "s2")["state"] == "failed_permanent"
    assert view["state"] == "compensating" and "card declined" in view["stop_reason"]
    assert step_states(view) == {"s1": "compensating", "s2": "failed"}
    assert dispatch_in(view, "s1", "compensation")["state"] == "queued"


async def test_an_uncertain_attempt_then_a_spent_budget_of_unsent_attempts_blocks(
    store: StoreUnderTest,
) -> None:
    saga = store.submit(serial_plan("p", ["pay_alo"]), "x")
    daemon = await store.dispatch_store()
    await step(daemon, UNKNOWN)  # may have committed
    for _ in range(2):  # known not committed, which says nothing about attempt 1
        store.make_due()
        await step(daemon, RETRYABLE)
    view = store.view(saga)
    dispatch = dispatch_in(view, "s1")
    assert (dispatch["state"], dispatch["attempt"], dispatch["uncertain_attempt"]) == (
        "blocked_unknown",
        3,
        1,
    )
    assert (
        view["state"] == "blocked_unknown"
        and "attempt 1 may have committed" in (view["stop_reason"])
    )


# -- permanent ----------------------------------------------------------------------------------


async def test_permanent_failure_with_nothing_done_fails_the_saga(store: StoreUnderTest) -> None:
    saga = store.submit(serial_plan("p", ["pay", "pay"], {"s1": "undo", "s2": "undo"}), "x")
    daemon = await store.dispatch_store()
    await step(daemon, PERMANENT, error="card declined")
    view = store.view(saga)
    assert view["state"] == "failed" and "card declined" in view["stop_reason"]
    assert step_states(view) == {"s1": "failed", "s2": "pending"}
    assert dispatch_in(view, "s1")["state"] == "failed_permanent"
    assert not has_dispatch(view, "s1", "compensation")
    assert await daemon.claim({"dest": 10}) == []


async def test_permanent_failure_compensates_in_reverse_order_of_succeeded_steps(
    store: StoreUnderTest,
) -> None:
    plan = serial_plan(
        "p", ["pay", "pay", "pay", "pay", "pay"], {"s1": "undo", "s3": "undo", "s4": "undo"}
    )
    saga = store.submit(plan, "x")
    daemon = await store.dispatch_store()
    for effect in ("s1", "s2", "s3", "s4"):
        claim, _ = await step(daemon, SUCCESS, result={"done": effect})
        assert claim.effect_id == effect
    await step(daemon, PERMANENT)
    view = store.view(saga)
    assert view["state"] == "compensating"
    assert step_states(view) == {
        "s1": "succeeded",
        "s2": "succeeded",
        "s3": "succeeded",
        "s4": "compensating",
        "s5": "failed",
    }

    undone = []
    while claims := await daemon.claim({"dest": 10}):
        assert len(claims) == 1  # one compensation at a time, the next after it succeeded
        [claim] = claims
        await send(daemon, claim)
        assert (await daemon.record([completion(claim, SUCCESS)])).applied == 1
        undone.append((claim.effect_id, claim.direction.value, claim.verb))
    assert undone == [
        ("s4", "compensation", "undo"),
        ("s3", "compensation", "undo"),
        ("s1", "compensation", "undo"),  # s2 has compensate "none": nothing to undo
    ]
    view = store.view(saga)
    assert view["state"] == "compensated"
    assert "s5" in view["stop_reason"]  # compensated keeps the reason compensation began
    assert step_states(view) == {
        "s1": "compensated",
        "s2": "succeeded",
        "s3": "compensated",
        "s4": "compensated",
        "s5": "failed",
    }
    enqueued = [(e[1], e[2]) for e in timeline(view, "dispatch_enqueued") if e[2] == "compensation"]
    assert enqueued == [("s4", "compensation"), ("s3", "compensation"), ("s1", "compensation")]


# -- unknown ------------------------------------------------------------------------------------


async def test_unknown_blocks_an_at_most_once_verb_after_one_attempt(
    store: StoreUnderTest,
) -> None:
    saga = store.submit(serial_plan("p", ["pay"]), "x")
    daemon = await store.dispatch_store()
    await step(daemon, UNKNOWN)
    view = store.view(saga)
    dispatch = dispatch_in(view, "s1")
    assert (dispatch["state"], dispatch["uncertain_attempt"], dispatch["attempt"]) == (
        "blocked_unknown",
        1,
        1,
    )
    assert view["state"] == "blocked_unknown" and "at_most_once" in view["stop_reason"]
    store.make_due()
    assert await daemon.claim({"dest": 10}) == []


async def test_unknown_retries_an_at_least_once_verb_with_the_same_key_until_blocked(
    store: StoreUnderTest,
) -> None:
    saga = store.submit(serial_plan("p", ["pay_alo"]), "x")
    daemon = await store.dispatch_store()
    keys = []
    for attempt in (1, 2):
        claim, _ = await step(daemon, UNKNOWN)
        keys.append(claim.idempotency_key)
        dispatch = dispatch_in(store.view(saga), "s1")
        assert (dispatch["state"], dispatch["attempt"]) == ("retry_wait", attempt)
        assert dispatch["uncertain_attempt"] == 1  # the earliest uncertain attempt
        store.make_due()
    claim, _ = await step(daemon, UNKNOWN)
    keys.append(claim.idempotency_key)
    assert len(set(keys)) == 1
    view = store.view(saga)
    assert dispatch_in(view, "s1")["state"] == "blocked_unknown"
    assert view["state"] == "blocked_unknown" and "budget exhausted" in view["stop_reason"]


# -- stale fence ------------------------------------------------------------------------------


@pytest.mark.parametrize("verb", ["pay", "pay_alo"])
async def test_stale_fence_blocks(store: StoreUnderTest, verb: str) -> None:
    saga = store.submit(serial_plan("p", [verb]), "x")
    daemon = await store.dispatch_store()
    await step(daemon, STALE)
    view = store.view(saga)
    assert dispatch_in(view, "s1")["state"] == "blocked_fence"
    assert view["state"] == "blocked_fence" and "stale" in view["stop_reason"]
    store.make_due()
    assert await daemon.claim({"dest": 10}) == []


# -- compensation failures --------------------------------------------------------------------


async def _compensating(store: StoreUnderTest) -> tuple[str, DispatchStore]:
    saga = store.submit(serial_plan("p", ["pay", "pay"], {"s1": "undo"}), "x")
    daemon = await store.dispatch_store()
    await step(daemon, SUCCESS)
    await step(daemon, PERMANENT)
    assert store.view(saga)["state"] == "compensating"
    return saga, daemon


async def test_a_compensation_that_fails_permanently_blocks_the_saga(
    store: StoreUnderTest,
) -> None:
    saga, daemon = await _compensating(store)
    claim, _ = await step(daemon, PERMANENT)
    assert (claim.effect_id, claim.direction.value) == ("s1", "compensation")
    view = store.view(saga)
    assert dispatch_in(view, "s1", "compensation")["state"] == "failed_permanent"
    assert view["state"] == "blocked_compensation"
    assert "compensation of 's1' failed" in view["stop_reason"]
    assert step_states(view)["s1"] == "compensating"


async def test_a_compensation_out_of_time_blocks_the_saga(store: StoreUnderTest) -> None:
    saga, daemon = await _compensating(store)
    for _ in range(3):  # undo has max_attempts 2: it bounds unknown outcomes only
        await step(daemon, RETRYABLE)
        assert dispatch_in(store.view(saga), "s1", "compensation")["state"] == "retry_wait"
        store.make_due()
    store.spend_time_budget()
    await step(daemon, RETRYABLE)
    view = store.view(saga)
    assert view["state"] == "blocked_compensation" and "give_up_after" in view["stop_reason"]


async def test_record_applies_one_transition_per_saga_per_batch(store: StoreUnderTest) -> None:
    sagas = [store.submit(serial_plan("p", ["pay"]), f"x-{i}") for i in range(3)]
    daemon = await store.dispatch_store()
    claims = await daemon.claim({"dest": 10})
    ready, _ = await daemon.write_ahead(claims)
    assert len(ready) == 3
    report = await daemon.record([completion(c, SUCCESS) for c in claims])
    assert (report.applied, report.late, report.dropped, report.deferred) == (3, 0, 0, [])
    assert [store.view(s)["state"] for s in sagas] == ["completed"] * 3


async def test_a_late_answer_does_not_settle_when_a_later_attempt_was_sent(
    store: StoreUnderTest,
) -> None:
    saga = store.submit(serial_plan("p", ["pay_alo"]), "x")  # 3 attempts
    zombie = await store.dispatch_store(owner="zombie")
    lost = await claim_one(zombie)
    await send(zombie, lost)
    store.expire_leases()
    daemon = await store.dispatch_store(owner="daemon")
    await daemon.reclaim_expired()  # attempt 1 unknown: retried
    for _ in (2, 3):
        store.make_due()
        await step(daemon, UNKNOWN)
    view = store.view(saga)
    assert (view["state"], dispatch_in(view, "s1")["uncertain_attempt"]) == ("blocked_unknown", 1)

    report = await zombie.record([completion(lost, SUCCESS)])  # attempt 1's answer, at last
    assert (report.applied, report.late) == (0, 1)
    view = store.view(saga)
    assert view["state"] == "blocked_unknown"  # attempts 2 and 3 were sent: still unknown
    assert dispatch_in(view, "s1")["attempts"][0]["late_outcome"] == "success"


async def test_results_feed_the_arguments_of_later_steps_and_compensations(
    store: StoreUnderTest,
) -> None:
    ref = {"$result": "s1", "path": "/charge/id"}
    plan = {
        "plan_id": "refs",
        "steps": [
            {
                "id": "s1",
                "verb": "pay",
                "args": {"n": 1},
                "compensate": {"verb": "undo", "args": {"charge": ref}},
            },
            {"id": "s2", "verb": "pay", "args": {"charge": ref, "n": 2}, "compensate": "none"},
        ],
    }
    store.submit(plan, "x")
    daemon = await store.dispatch_store()
    await step(daemon, SUCCESS, result={"charge": {"id": "ch-ü-7", "amount": 1250}})
    second, _ = await step(daemon, PERMANENT)
    assert second.body == '{"charge":"ch-ü-7","n":2}'.encode()
    undo = await claim_one(daemon)
    assert (undo.effect_id, undo.direction) == ("s1", Direction.COMPENSATION)
    assert undo.body == '{"charge":"ch-ü-7"}'.encode()


async def test_contract_drift_found_before_the_call_blocks_the_saga(
    store: StoreUnderTest,
) -> None:
    saga = store.submit(serial_plan("p", ["pay"]), "x")
    daemon = await store.dispatch_store()
    claim = await claim_one(daemon)
    drift = Completion.not_sent(claim, Cause.CONTRACT_DRIFT, "contract drift: nothing was sent")
    assert (await daemon.record([drift])).applied == 1
    view = store.view(saga)
    assert view["state"] == "blocked_contract"
    s1 = dispatch_in(view, "s1")
    assert s1["state"] == "blocked_contract"
    assert (s1["attempts"][0]["outcome"], s1["attempts"][0]["sent_at"]) == (RETRYABLE.value, None)

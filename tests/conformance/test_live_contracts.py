"""Pinned contract vs live tuning, on every store: a verb's timeout and retry policy changed
in config apply to live sagas at their next attempt (no block); a change to what the contract
pins blocks the saga, and `adopt-contract` moves it to the loaded contract, audited."""

from __future__ import annotations

from typing import Any

import pytest

from effectusd.core.operator_decisions import Refused
from effectusd.core.states import Cause, OutcomeClass
from effectusd.core.transition import Completion
from effectusd.operator import adopt_contract, retry
from tests.conformance.support import (
    NOWHERE,
    RETRY,
    VERBS,
    StoreUnderTest,
    claim_one,
    dispatch_in,
    has_dispatch,
    step,
    step_states,
)
from tests.support.harness import make_config, serial_plan

OPS = "user:ops"
SUCCESS, RETRYABLE, UNKNOWN = OutcomeClass.SUCCESS, OutcomeClass.RETRYABLE, OutcomeClass.UNKNOWN


def _reconfigure(store: StoreUnderTest, **verbs: dict[str, Any]) -> None:
    """The config a restarted daemon would load: the conformance verbs, some changed."""
    store.config = make_config(
        NOWHERE,
        {**VERBS, **{name: {**VERBS[name], **body} for name, body in verbs.items()}},
        destinations={"other": {"base_url": NOWHERE, "timeout": "2s", "max_concurrency": 4}},
    )


def _events(store: StoreUnderTest, saga: str, kind: str) -> list[dict[str, Any]]:
    return [e for e in store.view(saga)["timeline"] if e["kind"] == kind]


# -- live tuning ---------------------------------------------------------------------------


async def test_tuned_timeout_and_retry_apply_to_a_live_saga_without_blocking_it(
    store: StoreUnderTest,
) -> None:
    saga = store.submit(serial_plan("p", ["pay", "pay"]), "x")  # pay: 3 attempts, 2s timeout
    _reconfigure(store, pay={"timeout": "45s", "retry": {**RETRY, "max_attempts": 5}})
    daemon = await store.dispatch_store()
    for attempt in (1, 2, 3):
        claim, _ = await step(daemon, RETRYABLE)
        assert claim.attempt == attempt
        # the call timeout and the lease follow the loaded config, not the enqueued row
        assert claim.timeout_ms == 45_000 and claim.max_attempts == 5
        assert claim.lease_seconds >= 45
        store.make_due()
    s1 = dispatch_in(store.view(saga), "s1")
    assert (s1["state"], s1["max_attempts"]) == ("retry_wait", 5)  # the row said 3
    await step(daemon, SUCCESS)  # attempt 4 of 5
    view = store.view(saga)
    assert view["state"] == "running"  # s2 was enqueued under the tuned contract: no block
    assert dispatch_in(view, "s2")["state"] == "queued"
    await step(daemon, SUCCESS)
    assert store.view(saga)["state"] == "completed"


async def test_a_max_attempts_lowered_below_the_requests_made_spends_the_budget(
    store: StoreUnderTest,
) -> None:
    saga = store.submit(serial_plan("p", ["pay_alo"]), "x")
    await step(await store.dispatch_store(), UNKNOWN)  # request 1 of 3 may have committed
    store.make_due()
    _reconfigure(store, pay_alo={"retry": {**RETRY, "max_attempts": 1}})
    tuned = await store.dispatch_store("daemon-b")
    claim = await claim_one(tuned)
    assert (claim.attempt, claim.max_attempts) == (2, 1)
    assert claim.budget_spent  # the pipeline does not send it: its guard settles it unsent
    await tuned.record([Completion.not_sent(claim, Cause.BUDGET_SPENT, "budget spent")])
    view = store.view(saga)
    assert view["state"] == "blocked_unknown"
    assert dispatch_in(view, "s1")["state"] == "blocked_unknown"
    assert "attempt 1 may have committed" in view["stop_reason"]


async def test_budgets_count_from_an_operators_retry_and_old_rows_keep_their_own(
    store: StoreUnderTest,
) -> None:
    # a row written before budgets were live (no base) keeps the budget it was written with
    old = store.submit(serial_plan("p", ["ship"]), "old")  # ship: 3 attempts
    mark = "?" if store.sqlite else "%s"
    store.execute(
        f"UPDATE effectus_saga_outbox SET budget_base = NULL WHERE saga_id = {mark}", (old,)
    )
    fenced = store.submit(serial_plan("p", ["pay"]), "fenced")
    daemon = await store.dispatch_store()
    await step(daemon, OutcomeClass.STALE_FENCE)  # attempt 1, blocked_fence
    store.run(retry(fenced, registry=store.registry, actor=OPS, evidence="fence fixed"))
    lowered = {"retry": {**RETRY, "max_attempts": 1}}
    _reconfigure(store, pay=lowered, ship=lowered)
    tuned = await store.dispatch_store("daemon-b")
    claim, _ = await step(tuned, RETRYABLE)
    # the fresh budget counts from the request the operator retried at: 1 + the live 1
    assert (claim.attempt, claim.max_attempts) == (2, 2)
    # known not committed: retried under the time budget, whatever max_attempts says
    assert dispatch_in(store.view(fenced), "s1")["state"] == "retry_wait"

    claim, _ = await step(tuned, RETRYABLE, destination="other")
    assert (claim.saga_id, claim.max_attempts) == (old, 3)
    assert dispatch_in(store.view(old), "s1")["state"] == "retry_wait"


# -- adopt-contract ------------------------------------------------------------------------


async def _blocked_by_the_guard(store: StoreUnderTest) -> str:
    """s1 of a pay,pay saga stopped by the pre-dispatch guard after pay's path changed."""
    saga = store.submit(serial_plan("p", ["pay", "pay"], {"s1": "undo"}), "x")
    daemon = await store.dispatch_store()
    claim = await claim_one(daemon)
    guard = Completion.not_sent(claim, Cause.CONTRACT_DRIFT, "contract drift")
    await daemon.record([guard])
    view = store.view(saga)
    assert view["state"] == "blocked_contract"
    assert f"effectusd adopt-contract {saga} --evidence 'WHAT YOU CHECKED'" in view["next_actions"]
    _reconfigure(store, pay={"path": "/v2/pay/{args.n}"})
    return saga


async def test_adopt_contract_rebuilds_the_stopped_dispatch_and_the_saga_completes(
    store: StoreUnderTest,
) -> None:
    saga = await _blocked_by_the_guard(store)
    before = store.view(saga)
    live_hash = store.registry.verbs["pay"].contract_hash
    report = store.run(
        adopt_contract(saga, registry=store.registry, actor=OPS, evidence="v2 path, same API")
    )
    assert report.action == "adopt_contract"
    assert report.saga_state == {"from": "blocked_contract", "to": "running"}
    assert report.dispatch_state == {"from": "blocked_contract", "to": "retry_wait"}
    assert report.detail["verbs"] == ["pay"]
    assert {(r["effect_id"], r["direction"], r["to"]) for r in report.detail["repinned"]} == {
        ("s1", "forward", live_hash),
        ("s2", "forward", live_hash),
    }
    view = store.view(saga)
    assert view["plan_digest"] == report.detail["plan_digest"]["to"] != before["plan_digest"]
    assert {s["contract_hash"] for s in view["steps"]} == {live_hash}
    [adopted] = _events(store, saga, "contract_adopted")
    assert (adopted["actor"], adopted["evidence"]) == (OPS, "v2 path, same API")

    daemon = await store.dispatch_store("daemon-b")
    claim, _ = await step(daemon, SUCCESS)
    assert (claim.effect_id, claim.attempt, claim.path) == ("s1", 2, "/v2/pay/1")
    assert claim.contract_hash == live_hash
    assert claim.idempotency_key == dispatch_in(before, "s1")["idempotency_key"]
    claim, _ = await step(daemon, SUCCESS)
    assert (claim.effect_id, claim.path, claim.contract_hash) == ("s2", "/v2/pay/2", live_hash)
    assert store.view(saga)["state"] == "completed"


async def test_adopt_contract_builds_a_dispatch_that_was_blocked_at_enqueue(
    store: StoreUnderTest,
) -> None:
    saga = store.submit(serial_plan("p", ["pay", "ship"]), "x")
    _reconfigure(store, ship={"path": "/ship/v2/{args.n}", "delivery": "at_least_once"})
    daemon = await store.dispatch_store()
    await step(daemon, SUCCESS)
    view = store.view(saga)
    assert view["state"] == "blocked_contract" and not has_dispatch(view, "s2")

    report = store.run(
        adopt_contract(saga, registry=store.registry, actor=OPS, evidence="ship v2 is live")
    )
    assert report.decision == "enqueue" and report.detail["verbs"] == ["ship"]
    assert [e["effect_id"] for e in report.enqueued] == ["s2"]
    claim, _ = await step(daemon, SUCCESS, destination="other")
    assert (claim.path, claim.delivery.value) == ("/ship/v2/2", "at_least_once")
    view = store.view(saga)
    assert view["state"] == "completed" and step_states(view) == {
        "s1": "succeeded",
        "s2": "succeeded",
    }
    assert [e["evidence"] for e in _events(store, saga, "contract_adopted")] == ["ship v2 is live"]


async def test_adopt_contract_refusals_write_nothing(store: StoreUnderTest) -> None:
    saga = await _blocked_by_the_guard(store)
    running = store.submit(serial_plan("p", ["pay"]), "running")
    with pytest.raises(Refused, match="not blocked_contract"):
        store.run(adopt_contract(running, registry=store.registry, actor=OPS, evidence="e"))

    # the changed contract's schema refuses the arguments the saga resolved: not adopted
    _reconfigure(store, pay={"args_schema": {"type": "object", "required": ["m"]}})
    before = store.view(saga)
    with pytest.raises(Refused, match="s1") as refused:
        store.run(adopt_contract(saga, registry=store.registry, actor=OPS, evidence="e"))
    assert "'m'" in refused.value.message
    with pytest.raises(Refused, match="not in the loaded config"):
        store.run(adopt_contract(saga, registry=store.registry, actor=OPS, evidence="e", verb="x"))
    _reconfigure(store)  # the original config again: nothing to adopt, retry applies
    with pytest.raises(Refused, match="nothing to adopt"):
        store.run(adopt_contract(saga, registry=store.registry, actor=OPS, evidence="e"))
    assert store.view(saga) == before


async def test_adopt_one_verb_leaves_a_saga_blocked_on_another_verb(
    store: StoreUnderTest,
) -> None:
    saga = await _blocked_by_the_guard(store)  # blocked on pay
    _reconfigure(store, pay={"path": "/v2/pay/{args.n}"}, undo={"path": "/v2/undo"})
    before = store.view(saga)
    with pytest.raises(Refused, match="blocked on verb 'pay'"):
        store.run(
            adopt_contract(saga, registry=store.registry, actor=OPS, evidence="e", verb="undo")
        )
    assert store.view(saga) == before

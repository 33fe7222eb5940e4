"""The store-neutral reads: a saga view has the same shape and types on every store (it is what
`sagas show --json` prints), list_sagas filters alike, JSON and times round-trip."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from effectusd.core.states import OutcomeClass
from effectusd.operator import cancel
from effectusd.store import operations
from tests.conformance.support import (
    StoreUnderTest,
    claim_one,
    completion,
    dispatch_in,
    send,
    step,
)
from tests.support.harness import serial_plan

TS = "timestamp"
JSON = "json"
OPT = None  # marks a field that may be null

SAGA = {
    "saga_id": str,
    "namespace": str,
    "execution_id": str,
    "plan_id": str,
    "plan_digest": str,
    "state": str,
    "stop_reason": (str, OPT),
    "cancel_requested_at": (TS, OPT),
    "cancel_requested_by": (str, OPT),
    "revision": int,
    "created_at": TS,
    "updated_at": TS,
    "finished_at": (TS, OPT),
    "facts": dict,
    "steps": list,
    "timeline": list,
    "next_actions": list,
}
STEP = {
    "effect_id": str,
    "sequence": int,
    "verb": str,
    "contract_hash": str,
    "state": str,
    "args_hash": (str, OPT),
    "result": (JSON, OPT),
    "after": list,
    "succeeded_order": (int, OPT),
    "has_compensation": bool,
    "dispatches": list,
}
DISPATCH = {
    "direction": str,
    "state": str,
    "attempt": int,
    "requests": int,
    "max_attempts": int,
    "idempotency_key": str,
    "destination": str,
    "verb": str,
    "contract_hash": str,
    "delivery": str,
    "method": str,
    "path": str,
    "args_hash": str,
    "args_canonical": str,
    "fencing_resources": list,
    "grants": (list, OPT),
    "next_attempt_at": TS,
    "lease_owner": (str, OPT),
    "lease_expires_at": (TS, OPT),
    "uncertain_attempt": (int, OPT),
    "last_outcome": (str, OPT),
    "last_error": (str, OPT),
    "created_at": TS,
    "updated_at": TS,
    "fence_waits": int,
    "fence_wait_since": (TS, OPT),
    "budget_started_at": (TS, OPT),
    "gives_up_at": (TS, OPT),
    "waiting": (str, OPT),
    "attempts": list,
}
ATTEMPT = {
    "attempt": int,
    "request_id": str,
    "outcome": (str, OPT),
    "settled_by": (str, OPT),
    "fencing_status": (str, OPT),
    "grants": (list, OPT),
    "sent_at": (TS, OPT),
    "not_sent": bool,
    "completed_at": (TS, OPT),
    "status_code": (int, OPT),
    "error": (str, OPT),
    "evidence": (dict, OPT),
    "claimed_at": TS,
    "lease_owner": str,
    "lease_expires_at": TS,
    "late": bool,
    "late_outcome": (str, OPT),
    "late_status_code": (int, OPT),
    "late_error": (str, OPT),
    "late_at": (TS, OPT),
}
EVENT = {
    "event_id": int,
    "at": TS,
    "kind": str,
    "effect_id": (str, OPT),
    "direction": (str, OPT),
    "attempt": (int, OPT),
    "from_state": (str, OPT),
    "to_state": (str, OPT),
    "actor": str,
    "evidence": (str, OPT),
    "detail": dict,
}


def check_shape(where: str, value: dict[str, Any], shape: dict[str, Any]) -> list[str]:
    """What in ``value`` does not have the type ``shape`` says (an empty list: all of it does)."""
    problems = []
    if set(value) != set(shape):
        problems.append(f"{where}: fields {sorted(set(value) ^ set(shape))} differ")
    for name, wanted in shape.items():
        allowed = wanted if isinstance(wanted, tuple) else (wanted,)
        got = value.get(name)
        if got is None and OPT in allowed:
            continue
        if not any(_is(got, kind) for kind in allowed if kind is not OPT):
            problems.append(f"{where}.{name} = {got!r}")
    return problems


def _is(value: Any, kind: Any) -> bool:
    if kind == TS:
        if not isinstance(value, str):
            return False
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return False
        return parsed.utcoffset() is not None and abs(parsed - datetime.now(UTC)) < timedelta(
            hours=1
        )
    if kind == JSON:
        return value is None or isinstance(value, dict | list | str | int | float | bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def all_problems(view: dict[str, Any]) -> list[str]:
    problems = check_shape("saga", view, SAGA)
    for s in view["steps"]:
        problems += check_shape(f"step {s['effect_id']}", s, STEP)
        for d in s["dispatches"]:
            where = f"dispatch {s['effect_id']}/{d['direction']}"
            problems += check_shape(where, d, DISPATCH)
            for a in d["attempts"]:
                problems += check_shape(f"{where} attempt {a['attempt']}", a, ATTEMPT)
    for e in view["timeline"]:
        problems += check_shape(f"event {e.get('event_id')} {e.get('kind')}", e, EVENT)
    return problems


async def test_a_saga_view_has_the_same_shape_on_every_store(store: StoreUnderTest) -> None:
    plan = serial_plan("p", ["fenced", "pay_alo", "pay"], {"s1": "undo"})
    saga = store.submit(plan, "x", facts={})
    assert all_problems(store.view(saga)) == []
    daemon = await store.dispatch_store()
    await step(daemon, OutcomeClass.SUCCESS, result={"id": "r-1"})  # fenced: grants
    [(token,)] = store.execute("SELECT last_token FROM effectus_fencing_counters")
    zombie = await store.dispatch_store(owner="zombie")
    lost = await claim_one(zombie)
    await send(zombie, lost)
    store.expire_leases()
    await daemon.reclaim_expired()  # unknown, retried: uncertain_attempt
    await zombie.record([completion(lost, OutcomeClass.PERMANENT, error="late no")])  # late
    store.make_due()
    await claim_one(daemon)  # in flight: a lease on the dispatch row
    store.run(cancel(saga, registry=store.registry, actor="user:ops", evidence="why not"))

    view = store.view(saga)
    assert all_problems(view) == []
    # the optional fields this scenario fills are really filled, with what was written
    s1, s2 = dispatch_in(view, "s1"), dispatch_in(view, "s2")
    assert s1["grants"] == [{"resource": "res:1", "token": token}]
    assert s1["fencing_resources"] == ["res:1"]
    assert view["steps"][0]["result"] == {"id": "r-1"}
    assert s2["uncertain_attempt"] == 1 and s2["lease_owner"] == "daemon-a"
    first = s2["attempts"][0]
    assert (first["late"], first["late_outcome"], first["late_error"]) == (
        True,
        "permanent_failure",
        "late no",
    )
    # a reclaim says only whether the attempt may have been sent
    assert first["evidence"] == {"sent": "maybe_sent"} and first["settled_by"] == "reclaim"
    assert s2["attempts"][1]["late"] is False
    assert view["cancel_requested_by"] == "user:ops" and view["cancel_requested_at"]
    assert view["steps"][0]["has_compensation"] is True
    assert view["steps"][1]["has_compensation"] is False
    assert view["facts"] == {}


async def test_json_values_round_trip_unchanged(store: StoreUnderTest) -> None:
    value = {
        "text": 'ünïcødé ✓ "quoted" \\ back',
        "big": 9007199254740991,
        "negative": -42,
        "half": 0.5,
        "nested": [1, {"a": None, "b": [True, False]}],
        "empty": {},
        "none": None,
    }
    plan = {**serial_plan("p", ["pay", "pay"]), "facts": {"payload": "object"}}
    saga = store.submit(plan, "x", facts={"payload": value})
    daemon = await store.dispatch_store()
    await step(daemon, OutcomeClass.SUCCESS, result=value)
    await step(daemon, OutcomeClass.SUCCESS, result="just a string")
    view = store.view(saga)
    assert view["facts"] == {"payload": value}
    assert view["steps"][0]["result"] == value
    assert view["steps"][1]["result"] == "just a string"


async def test_list_sagas_filters_and_orders_alike(store: StoreUnderTest) -> None:
    first = store.submit(serial_plan("alpha", ["pay"]), "1")
    second = store.submit(serial_plan("beta", ["pay"]), "2")
    third = store.submit(serial_plan("alpha", ["pay"]), "3")
    daemon = await store.dispatch_store()
    claim = next(c for c in await daemon.claim({"dest": 10}) if c.saga_id == second)
    await send(daemon, claim)
    await daemon.record([completion(claim, OutcomeClass.SUCCESS)])

    def ids(**filters: Any) -> list[str]:
        return [row["saga_id"] for row in store.run(operations.list_sagas(**filters))]

    assert ids() == [third, second, first]  # newest first
    assert ids(state="completed") == [second]
    assert ids(state="running") == [third, first]
    assert ids(plan_id="alpha") == [third, first]
    assert ids(namespace="default", limit=2) == [third, second]
    assert ids(namespace="elsewhere") == []
    assert ids(older_than=timedelta(hours=1)) == []
    assert ids(execution_id="2") == [second]
    assert ids(execution_id="2", plan_id="alpha") == []
    assert ids(destination="dest") == [third, second, first]
    assert ids(destination="elsewhere") == []
    [row] = store.run(operations.list_sagas(state="completed"))
    assert set(row) == {
        "saga_id",
        "execution_id",
        "plan_id",
        "state",
        "stop_reason",
        "created_at",
        "updated_at",
    }
    assert isinstance(row["created_at"], datetime) and row["created_at"].utcoffset() is not None


@pytest.mark.parametrize("naive", [False, True])
async def test_not_before_is_a_point_in_time_whatever_its_zone(
    store: StoreUnderTest, naive: bool
) -> None:
    due = datetime.now(UTC) + timedelta(hours=2)
    not_before = due.replace(tzinfo=None) if naive else due.astimezone()  # naive means UTC
    saga = store.submit(serial_plan("p", ["pay"]), "x", not_before=not_before)
    next_at = datetime.fromisoformat(dispatch_in(store.view(saga), "s1")["next_attempt_at"])
    assert abs((next_at - due).total_seconds()) < 1
    daemon = await store.dispatch_store()
    waiting = await daemon.seconds_until_due(["dest"])
    assert waiting is not None and 7190 < waiting <= 7200


async def test_reclaim_takes_at_most_its_limit(store: StoreUnderTest) -> None:
    for i in range(3):
        store.submit(serial_plan("p", ["pay"]), f"x-{i}")
    daemon = await store.dispatch_store()
    assert len(await daemon.claim({"dest": 10})) == 3
    store.expire_leases()
    assert (await daemon.reclaim_expired(limit=2)).applied == 2
    assert (await daemon.reclaim_expired(limit=2)).applied == 1
    assert (await daemon.reclaim_expired(limit=2)).applied == 0
    assert await daemon.outbox_counts(horizon_s=3600) == (0, 3)


async def test_a_closed_store_refuses_work_and_holds_no_connection(
    store: StoreUnderTest,
) -> None:
    daemon = await store.dispatch_store(owner="closing")
    await daemon.ping()
    await daemon.close()  # what the daemon calls last on its way out
    assert store.server_connections("closing") == 0
    with pytest.raises(Exception):  # noqa: B017 - each store refuses in its own words
        await daemon.ping()


async def test_the_text_view_shows_each_attempts_error(store: StoreUnderTest) -> None:
    from effectusd.cli import render

    saga = store.submit(serial_plan("p", ["pay"]), "x")
    daemon = await store.dispatch_store()
    await step(daemon, OutcomeClass.RETRYABLE, error="upstream said busy")
    store.make_due()
    await step(daemon, OutcomeClass.PERMANENT, error="card declined")

    lines = render.saga_detail(store.typed_view(saga)).splitlines()
    first = next(i for i, line in enumerate(lines) if line.strip().startswith("#1 "))
    second = next(i for i, line in enumerate(lines) if line.strip().startswith("#2 "))
    assert lines[first + 1].strip() == "error: upstream said busy"
    assert lines[second + 1].strip() == "error: card declined"


async def test_find_sagas_by_id_prefix_or_by_execution_id(store: StoreUnderTest) -> None:
    ids = {
        (execution, plan): store.submit(serial_plan(plan, ["pay"]), execution)
        for execution in ("order-1", "order-2")
        for plan in ("checkout", "refund")
    }
    target = ids[("order-1", "checkout")]

    def found(**kwargs: Any) -> list[str]:
        return [row["saga_id"] for row in store.run(operations.find_sagas(**kwargs))]

    unique = next(n for n in range(1, 65) if [i[:n] for i in ids.values()].count(target[:n]) == 1)
    assert found(prefix=target[:unique]) == [target]
    assert found(prefix=target) == [target]
    assert sorted(found(prefix="")) == sorted(ids.values())  # every id starts with ""
    assert found(prefix="g") == []
    assert found(namespace="default", execution_id="order-1") == [
        ids[("order-1", "checkout")],
        ids[("order-1", "refund")],
    ]  # ordered by plan id
    assert found(namespace="default", execution_id="order-1", plan_id="checkout") == [target]
    assert found(namespace="other", execution_id="order-1") == []
    [row] = store.run(operations.find_sagas(prefix=target))
    assert row == {
        "saga_id": target,
        "execution_id": "order-1",
        "plan_id": "checkout",
        "state": "running",
    }

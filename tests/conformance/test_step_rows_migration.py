"""Sagas written by the version before migration 10016 (their step rows holding every step's
state, resolved arguments, result and order of success; their outbox rows none of it) read
the same after it, where a step's life is read from its dispatch rows
(effectusd/core/steps.py), and go on from where they were.

The older version's database is this version's made as that version left it: every step row
given the state, arguments, result and order it stored, the outbox's two new columns dropped
and 10016 unrecorded; then the real migration runs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from effectusd.core.states import OutcomeClass
from effectusd.store.dispatch import DispatchStore
from tests.conformance.support import StoreUnderTest, dispatch_in, step, step_states, timeline
from tests.support import backends

OK, FAIL, UNKNOWN = OutcomeClass.SUCCESS, OutcomeClass.PERMANENT, OutcomeClass.UNKNOWN


def chain(name: str, s2_reads: str = "/id") -> dict[str, Any]:
    """s1, s2, s3, each reading the result of the one before (s2 its path ``s2_reads``);
    s1 and s2 undone, s1's undo reading s1's result."""
    return {
        "plan_id": name,
        "steps": [
            {
                "id": "s1",
                "verb": "pay",
                "args": {"n": 1},
                "compensate": {"verb": "undo", "args": {"r": {"$result": "s1", "path": "/id"}}},
            },
            {
                "id": "s2",
                "verb": "pay",
                "args": {"r": {"$result": "s1", "path": s2_reads}},
                "compensate": {"verb": "undo", "args": {"n": 2}},
            },
            {
                "id": "s3",
                "verb": "pay",
                "args": {"r": {"$result": "s2", "path": "/id"}},
                "compensate": "none",
            },
        ],
    }


FAN = {
    "plan_id": "fan",
    "steps": [
        {"id": "a", "verb": "pay", "args": {"n": 1}, "compensate": {"verb": "undo", "args": {}}},
        {"id": "b", "verb": "pay", "args": {"n": 2}, "after": ["a"], "compensate": "none"},
        {"id": "c", "verb": "pay", "args": {"n": 3}, "after": ["a"], "compensate": "none"},
    ],
}

# (saga, plan, the outcomes its dispatches get, one by one, in order)
SAGAS: list[tuple[str, dict[str, Any], list[OutcomeClass]]] = [
    ("completed", chain("p"), [OK, OK, OK]),
    ("compensated", chain("p"), [OK, OK, FAIL, OK, OK]),
    ("failed", chain("p"), [FAIL]),
    ("blocked-unknown", chain("p"), [OK, UNKNOWN]),  # pay is at_most_once
    ("blocked-compensation", chain("p"), [OK, FAIL, FAIL]),
    # s1's result has no /other: s2 fails at enqueue, with no dispatch (its row keeps it)
    ("failed-at-enqueue", chain("q", "/other"), [OK]),
    ("fan-out", FAN, [OK, FAIL]),  # one sibling fails, the other is canceled unsent
    ("compensating", chain("p"), [OK, FAIL]),
    ("running", chain("p"), [OK]),
]


@pytest.fixture(
    params=[pytest.param("postgres", marks=pytest.mark.postgres), pytest.param("sqlite")]
)
async def fresh(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StoreUnderTest]:
    """A store of its own (its schema is taken back to 10015 here, so never the shared one)."""
    if request.param == "postgres":
        url = request.getfixturevalue("empty_database")
    else:
        url = f"sqlite:///{tmp_path / 'effectusd.db'}"
    with backends.connection(url, create=True) as conn:
        backends.migrate(conn)
    under_test = StoreUnderTest(request.param, url)
    try:
        yield under_test
    finally:
        await under_test.close()


async def drive(daemon: DispatchStore, outcomes: list[OutcomeClass], saga: str) -> None:
    for index, outcome in enumerate(outcomes):
        result = {"id": f"{saga}-{index}"} if outcome is OK else None
        await step(daemon, outcome, result=result)


def as_the_older_version_left_it(store: StoreUnderTest, views: dict[str, Any]) -> None:
    """Each step row as the version before 10016 wrote it; the outbox without 10016's columns."""
    forward = (
        "(SELECT {column} FROM effectus_saga_outbox o WHERE o.saga_id = st.saga_id"
        " AND o.effect_id = st.effect_id AND o.direction = 'forward')"
    )
    args = forward.format(column="o.args_canonical" + ("" if store.sqlite else "::jsonb"))
    store.execute(
        "UPDATE effectus_saga_steps AS st SET "
        + ", ".join(
            [
                f"args = {args}",
                f"args_hash = {forward.format(column='o.args_hash')}",
                f"result = {forward.format(column='o.result')}",
                f"succeeded_order = {forward.format(column='o.succeeded_order')}",
            ]
        )
    )
    mark = "?" if store.sqlite else "%s"
    for saga_id, view in views.items():
        for each in view["steps"]:
            store.execute(
                f"UPDATE effectus_saga_steps SET state = {mark}"
                f" WHERE saga_id = {mark} AND effect_id = {mark}",
                (each["state"], saga_id, each["effect_id"]),
            )
    for column in ("result", "succeeded_order"):
        store.execute(f"ALTER TABLE effectus_saga_outbox DROP COLUMN {column}")
    store.execute("DELETE FROM effectus_schema_migrations WHERE version = 10016")


def stored_steps(store: StoreUnderTest, saga_id: str) -> list[tuple[Any, ...]]:
    """What the older version showed of a saga's steps: its step rows."""
    mark = "?" if store.sqlite else "%s"
    rows = store.execute(
        "SELECT effect_id, state, result, succeeded_order, args_hash FROM effectus_saga_steps"
        f" WHERE saga_id = {mark} ORDER BY sequence",
        (saga_id,),
    )
    return [tuple(row) for row in rows]


def shown_steps(view: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [
        (s["effect_id"], s["state"], s["result"], s["succeeded_order"], s["args_hash"])
        for s in view["steps"]
    ]


async def test_sagas_an_older_version_wrote_read_the_same_after_10016_and_go_on(
    fresh: StoreUnderTest,
) -> None:
    store = fresh
    daemon = await store.dispatch_store()
    sagas = {}
    for name, plan, outcomes in SAGAS:
        sagas[name] = store.submit(plan, name)
        await drive(daemon, outcomes, name)
        # what it left queued waits until after the migration (the next saga's claims
        # take the oldest due row)
        store.execute(
            f"UPDATE effectus_saga_outbox SET next_attempt_at = {store.now_sql()}"
            f" + {store.seconds_sql(3600)} WHERE state = 'queued'"
        )
    await daemon.close()
    views = {saga_id: store.view(saga_id) for saga_id in sagas.values()}
    assert {name: views[s]["state"] for name, s in sagas.items()} == {
        "completed": "completed",
        "compensated": "compensated",
        "failed": "failed",
        "blocked-unknown": "blocked_unknown",
        "blocked-compensation": "blocked_compensation",
        "failed-at-enqueue": "compensating",
        "fan-out": "compensating",
        "compensating": "compensating",
        "running": "running",
    }
    assert step_states(views[sagas["failed-at-enqueue"]])["s2"] == "failed"
    assert sorted(step_states(views[sagas["fan-out"]]).values()) == [
        "compensating",
        "failed",
        "pending",  # the sibling canceled unsent
    ]

    as_the_older_version_left_it(store, views)
    for saga_id, view in views.items():
        assert stored_steps(store, saga_id) == shown_steps(view), saga_id  # as it showed them
    with store.connect() as conn:
        assert [m.version for m in backends.migrate(conn)] == [10016]

    for saga_id, view in views.items():
        assert store.view(saga_id) == view, saga_id  # steps, dispatches and timeline alike

    # They go on: every dispatch still due answered with success, reading the results the
    # older version stored (s2's arguments are s1's result, s1's undo too) ...
    store.make_due()
    daemon = await store.dispatch_store()
    answered = 0
    while store.execute("SELECT count(*) FROM effectus_saga_outbox WHERE state = 'queued'")[0][0]:
        await step(daemon, OK, result={"id": f"later-{answered}"})
        answered += 1
    assert answered == 5  # running: s2, s3; the three compensating sagas' undo of s1 or a
    ended = {name: store.view(s) for name, s in sagas.items()}
    assert {name: v["state"] for name, v in ended.items()} == {
        **{name: views[s]["state"] for name, s in sagas.items()},
        "failed-at-enqueue": "compensated",
        "fan-out": "compensated",
        "compensating": "compensated",
        "running": "completed",
    }
    running = ended["running"]
    assert step_states(running) == dict.fromkeys(("s1", "s2", "s3"), "succeeded")
    assert [s["succeeded_order"] for s in running["steps"]] == [1, 2, 3]
    s2 = dispatch_in(running, "s2")
    assert s2["args_hash"] == views[sagas["running"]]["steps"][1]["args_hash"]
    assert step_states(ended["failed-at-enqueue"]) == {
        "s1": "compensated",
        "s2": "failed",  # kept on its row through the migration
        "s3": "pending",
    }
    # ... and their timelines read as those of sagas this version wrote throughout
    for name, plan, outcomes in [
        ("running", chain("p"), [OK, OK, OK]),
        ("compensating", chain("p"), [OK, FAIL, OK]),
        ("failed-at-enqueue", chain("q", "/other"), [OK, OK]),
    ]:
        fresh_saga = store.submit(plan, f"{name}-again")
        await drive(daemon, outcomes, name)
        assert timeline(ended[name]) == timeline(store.view(fresh_saga)), name

"""Sagas written by the versions before migrations 10016 and 10018 read the same after them
and go on from where they were. Before 10016 their step rows held every step's state,
resolved arguments, result and order of success, their outbox rows none of it; after it a
step's life is read from its dispatch rows (effectusd/core/steps.py). Before 10018 a submit
wrote one step row per step and each outbox row's foreign key named its step; after it a
step is read from the saga's pinned plan, and the outbox row's foreign key names the saga.

An older version's database is this version's made as that version left it: every step row
written as its submit wrote it (and, for 10016, given the state, arguments, result and order
it stored, the outbox's two new columns dropped), the outbox keyed by its step again, and
the migrations from there on unrecorded; then the real migrations run."""

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


# A step row per step of every saga, as a submit wrote them before 10018 (pending, its pins
# from the plan); a kept one (a step that failed at enqueue) is there already.
STEP_ROWS = {
    "postgres": """
        INSERT INTO effectus_saga_steps
            (saga_id, effect_id, sequence, verb, contract_hash, compensation)
        SELECT s.saga_id, p.id, p.sequence, p.verb, p.contract_hash, p.compensate
        FROM effectus_saga_instances s
        CROSS JOIN LATERAL jsonb_to_recordset(s.plan -> 'steps')
            AS p(id text, sequence int, verb text, contract_hash text, compensate jsonb)
        ON CONFLICT (saga_id, effect_id) DO NOTHING""",
    "sqlite": """
        INSERT INTO effectus_saga_steps
            (saga_id, effect_id, sequence, verb, contract_hash, compensation)
        SELECT s.saga_id, json_extract(p.value, '$.id'), json_extract(p.value, '$.sequence'),
               json_extract(p.value, '$.verb'), json_extract(p.value, '$.contract_hash'),
               json_extract(p.value, '$.compensate')
        FROM effectus_saga_instances s, json_each(s.plan, '$.steps') p
        WHERE true
        ON CONFLICT (saga_id, effect_id) DO NOTHING""",
}
SAGA_KEY = "REFERENCES effectus_saga_instances (saga_id) ON DELETE CASCADE,"
STEP_KEY = (
    "FOREIGN KEY (saga_id, effect_id) REFERENCES effectus_saga_steps (saga_id, effect_id)"
    " ON DELETE CASCADE,\n    -- one forward and one compensation dispatch per step"
)


# 10015's trigger, as 10020 found it (10020 makes it again with settled_saga named).
SETTLEMENT_KEPT = {
    "postgres": """
        CREATE TRIGGER effectus_saga_attempts_settlement_kept
            AFTER UPDATE OF outcome, settled_by, status_code, error, completed_at, settled_to,
                settled_actor, settled_after, settled_step
            ON effectus_saga_attempts
            FOR EACH ROW WHEN (OLD.settled_to IS NOT NULL)
            EXECUTE FUNCTION effectus_timeline_entry_kept()""",
    "sqlite": """
        CREATE TRIGGER effectus_saga_attempts_settlement_kept
            BEFORE UPDATE OF outcome, settled_by, status_code, error, completed_at, settled_to,
                settled_actor, settled_after, settled_step
            ON effectus_saga_attempts
            WHEN OLD.settled_to IS NOT NULL
        BEGIN
            SELECT RAISE(ABORT, 'effectus_saga_attempts: a timeline entry is never rewritten');
        END""",
}


# 10022 undone: the hashes text again, each checked by its table as 10013 left them (the
# outbox's trigger names two of them, so it is made again around the change).
HEX_DOMAIN_UNDONE = (
    "DROP TRIGGER effectus_saga_outbox_enqueue_kept ON effectus_saga_outbox",
    *(
        f"ALTER TABLE {table} ALTER COLUMN {column} TYPE text,"
        f" ADD CONSTRAINT {table}_{column}_check"
        f" CHECK (length({column}) = 64 AND {column} ~ '^[0-9a-f]+$')"
        for table, column in backends.HEX_DOMAIN_COLUMNS
    ),
    "DROP DOMAIN effectus_hex64",
    """CREATE TRIGGER effectus_saga_outbox_enqueue_kept
        AFTER UPDATE OF saga_id, effect_id, direction, idempotency_key, args_hash, created_at,
            enqueued_by, started_from, enqueued_after
        ON effectus_saga_outbox
        FOR EACH ROW WHEN (OLD.enqueued_by IS NOT NULL)
        EXECUTE FUNCTION effectus_timeline_entry_kept()""",
)


def before_10020(store: StoreUnderTest, views: dict[str, Any]) -> None:
    """10022 and 10021 undone (the hashes' table checks and the request ID's unique index
    back), and each saga completion an attempt
    row carries (settled_saga) stored as its event, as the versions before 10020 wrote it
    (with the settlement's time; the last event of its saga), and the column gone.
    ``views``: each such entry given the event's id, as those versions showed it."""
    store.execute(
        "INSERT INTO effectus_saga_events (saga_id, kind, from_state, to_state, actor, at)"
        " SELECT o.saga_id, 'saga_state', 'running', a.settled_saga, a.settled_actor,"
        " a.completed_at FROM effectus_saga_attempts a"
        " JOIN effectus_saga_outbox o ON o.dispatch_id = a.dispatch_id"
        " WHERE a.settled_saga IS NOT NULL ORDER BY a.completed_at"
    )
    stored = store.execute(
        "SELECT saga_id, max(event_id) FROM effectus_saga_events"
        " WHERE kind = 'saga_state' AND to_state = 'completed' GROUP BY saga_id"
    )
    for saga_id, event_id in stored:
        (entry,) = [e for e in views[saga_id]["timeline"] if e["to_state"] == "completed"]
        assert entry["event_id"] < 0  # read from the row
        entry["event_id"] = event_id
    store.execute(
        "DROP TRIGGER effectus_saga_attempts_settlement_kept"
        + ("" if store.sqlite else " ON effectus_saga_attempts")
    )
    if store.sqlite:
        store.execute("ALTER TABLE effectus_saga_attempts DROP COLUMN settled_saga")
    else:
        store.execute(
            "ALTER TABLE effectus_saga_attempts DROP CONSTRAINT effectus_saga_attempts_saga_entry,"
            " DROP COLUMN settled_saga"
        )
    store.execute(SETTLEMENT_KEPT[store.kind])
    if not store.sqlite:  # 10021 and 10022 (on SQLite they change nothing)
        store.execute(
            "ALTER TABLE effectus_saga_attempts"
            " ADD CONSTRAINT effectus_saga_attempts_request_id_key UNIQUE (request_id)"
        )
        for statement in HEX_DOMAIN_UNDONE:
            store.execute(statement)
    # 10023 (tokens above the clock) is not undone: it is written to be applied over itself
    # 10024: the outbox's count of claims that ended unsent and its time budget's start
    if not store.sqlite:
        store.execute(
            "ALTER TABLE effectus_saga_outbox DROP CONSTRAINT effectus_saga_outbox_unsent"
        )
    for column in ("unsent", "budget_since", "gives_up_at"):
        store.execute(f"ALTER TABLE effectus_saga_outbox DROP COLUMN {column}")
    for view in views.values():  # as 10024 finds such rows: no budget started, fence waits apart
        for dispatch in (d for s in view["steps"] for d in s["dispatches"]):
            dispatch["budget_started_at"] = dispatch["gives_up_at"] = None
            dispatch["requests"] = dispatch["attempt"] - dispatch["fence_waits"]
    store.execute("DELETE FROM effectus_schema_migrations WHERE version >= 10020")


def as_submitted_before_10018(store: StoreUnderTest) -> None:
    """Every step of every saga with its step row, and each outbox row keyed by its step
    (its foreign key, and its delete guard: "rows leave only with their step"), as 10017
    left them; 10018 unrecorded."""
    store.execute(STEP_ROWS[store.kind])
    if store.sqlite:
        # SQLite changes a foreign key only in the table's text (no row refers to it): the
        # test puts the older text back, as its own connection's schema edit
        with store.connect() as conn:
            conn.execute("PRAGMA writable_schema = ON")
            conn.execute(
                "UPDATE sqlite_master SET sql = replace(replace(sql, ?, ','), ?, ?)"
                " WHERE type = 'table' AND name = 'effectus_saga_outbox'",
                (SAGA_KEY, "-- one forward and one compensation dispatch per step", STEP_KEY),
            )
            conn.execute("PRAGMA writable_schema = OFF")
        store.execute("DROP TRIGGER effectus_saga_outbox_no_direct_delete")
        store.execute(
            """CREATE TRIGGER effectus_saga_outbox_no_direct_delete
                BEFORE DELETE ON effectus_saga_outbox
                WHEN EXISTS (SELECT 1 FROM effectus_saga_steps
                             WHERE saga_id = OLD.saga_id AND effect_id = OLD.effect_id)
            BEGIN
                SELECT RAISE(ABORT, 'effectus_saga_outbox rows leave only with their step');
            END"""
        )
    else:
        store.execute(
            "ALTER TABLE effectus_saga_outbox DROP CONSTRAINT effectus_saga_outbox_saga_id_fkey,"
            " ADD CONSTRAINT effectus_saga_outbox_saga_id_effect_id_fkey"
            " FOREIGN KEY (saga_id, effect_id)"
            " REFERENCES effectus_saga_steps (saga_id, effect_id) ON DELETE CASCADE"
        )
    store.execute("DELETE FROM effectus_schema_migrations WHERE version >= 10018")


def versions_from(store: StoreUnderTest, first: int) -> list[int]:
    """Every migration of the store's set from ``first`` on: what a migrate applies once the
    records from ``first`` on are deleted (each later one runs again on the schema it left)."""
    migrations = (
        backends.sqlite_store_migrations if store.sqlite else backends.postgres_store_migrations
    )
    return [m.version for m in migrations.known_migrations() if m.version >= first]


def outbox_foreign_key(store: StoreUnderTest) -> list[tuple[Any, ...]]:
    """The table and columns the outbox's foreign key names."""
    if store.sqlite:
        rows = store.execute("PRAGMA foreign_key_list(effectus_saga_outbox)")
        return sorted((row[2], row[3]) for row in rows)
    return store.execute(
        "SELECT confrelid::regclass::text, pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE conrelid = 'effectus_saga_outbox'::regclass AND contype = 'f'"
    )


def as_the_older_version_left_it(store: StoreUnderTest, views: dict[str, Any]) -> None:
    """Each step row as the version before 10016 wrote it; the outbox without 10016's columns."""
    as_submitted_before_10018(store)
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
    # Later migrations are taken back too, so that 10016 runs on the schema it was written for.
    store.execute("DROP TABLE effectus_dispatch_probes")  # 10017
    store.execute("DROP INDEX effectus_saga_outbox_blocked_unknown")
    store.execute("DELETE FROM effectus_schema_migrations WHERE version >= 10016")


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


async def run_sagas(store: StoreUnderTest) -> tuple[dict[str, str], dict[str, Any]]:
    """Every saga of SAGAS driven as far as its outcomes take it: (their ids by name, their
    views by id)."""
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
    return sagas, views


async def go_on(store: StoreUnderTest, sagas: dict[str, str], views: dict[str, Any]) -> None:
    """Every dispatch still due answered with success, reading the results the older version
    stored (s2's arguments are s1's result, s1's undo too): the sagas end as this version's
    would, and their timelines read as those of sagas this version wrote throughout."""
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
    for name, plan, outcomes in [
        ("running", chain("p"), [OK, OK, OK]),
        ("compensating", chain("p"), [OK, FAIL, OK]),
        ("failed-at-enqueue", chain("q", "/other"), [OK, OK]),
    ]:
        fresh_saga = store.submit(plan, f"{name}-again")
        await drive(daemon, outcomes, name)
        assert timeline(ended[name]) == timeline(store.view(fresh_saga)), name


async def test_sagas_an_older_version_wrote_read_the_same_after_10016_and_go_on(
    fresh: StoreUnderTest,
) -> None:
    store = fresh
    sagas, views = await run_sagas(store)
    before_10020(store, views)
    as_the_older_version_left_it(store, views)
    for saga_id, view in views.items():
        assert stored_steps(store, saga_id) == shown_steps(view), saga_id  # as it showed them
    with store.connect() as conn:
        assert [m.version for m in backends.migrate(conn)] == versions_from(store, 10016)

    for saga_id, view in views.items():
        assert store.view(saga_id) == view, saga_id  # steps, dispatches and timeline alike
    await go_on(store, sagas, views)


async def test_sagas_submitted_with_step_rows_read_the_same_after_10018_and_go_on(
    fresh: StoreUnderTest,
) -> None:
    store = fresh
    sagas, views = await run_sagas(store)
    step_rows = "SELECT count(*) FROM effectus_saga_steps"
    assert store.execute(step_rows) == [(1,)]  # this version's: the step failed at enqueue
    before_10020(store, views)
    as_submitted_before_10018(store)
    assert store.execute(step_rows) == [(3 * 8 + 3,)]  # one per step, as submits wrote them
    assert outbox_foreign_key(store)[0][0] == "effectus_saga_steps"
    dispatches = "SELECT * FROM effectus_saga_outbox ORDER BY dispatch_id"
    attempts = "SELECT * FROM effectus_saga_attempts ORDER BY dispatch_id, attempt"
    before = (store.execute(dispatches), store.execute(attempts))
    sequence = "SELECT seq FROM sqlite_sequence WHERE name = 'effectus_saga_outbox'"
    ids = store.execute(sequence) if store.sqlite else None
    with store.connect() as conn:
        assert [m.version for m in backends.migrate(conn)] == versions_from(store, 10018)

    assert outbox_foreign_key(store)[0][0] == "effectus_saga_instances"
    # every row kept; the attempts gain 10020's column (their last), NULL on every row
    after = store.execute(attempts)
    # and the outbox 10024's three (its last): no claim ended unsent, no time budget started
    outbox = store.execute(dispatches)
    assert ([row[:-3] for row in outbox], [row[:-1] for row in after]) == before
    assert {row[-3:] for row in outbox} == {(0, None, None)}
    assert {row[-1] for row in after} == {None}
    if store.sqlite:  # the rebuilt outbox goes on numbering where the old one was
        assert store.execute(sequence) == ids
    assert store.execute(step_rows) == [(3 * 8 + 3,)]  # the older sagas' rows stay
    for saga_id, view in views.items():
        assert store.view(saga_id) == view, saga_id  # steps, dispatches and timeline alike
    await go_on(store, sagas, views)
    # a saga submitted now writes no step row; one that failed at enqueue adds its own
    assert store.execute(step_rows) == [(3 * 8 + 3 + 1,)]

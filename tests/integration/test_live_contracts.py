"""Pinned contract vs live tuning end to end: a real daemon against a real HTTP destination.
Tuning a verb's timeout or retry policy reaches live sagas at their next attempt and blocks
nothing; changing its path blocks them, and `effectusd adopt-contract` moves them on."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from tests.integration.test_operator import (
    ALICE,
    NOT_NOW,
    UNKNOWN,
    answer,
    cli,
    cli_json,
    config_file,
    events,
    key,
    saga_row,
)
from tests.support.destination import running
from tests.support.harness import (
    attempts_of,
    client_for,
    dispatch_of,
    fetch,
    make_config,
    run_until_idle,
    serial_plan,
)
from tests.unit.test_core_contracts import LEGACY_WITHOUT_RETRY_TABLE

pytestmark = pytest.mark.postgres

FAST = {"initial_backoff": "10ms", "max_backoff": "20ms"}


async def test_tuned_timeout_and_retry_budget_apply_to_live_sagas_without_blocking(
    db: str,
) -> None:
    rules = {("s1", "forward", 1): NOT_NOW, ("s1", "forward", 2): NOT_NOW}
    with running(answer(rules)) as dest:
        config = make_config(dest.base_url, {"work": {"retry": {"max_attempts": 2, **FAST}}})
        saga = (
            client_for(config, db)
            .submit(serial_plan("t", ["work", "work"]), execution_id="t-1")
            .saga_id
        )
        tuned = make_config(
            dest.base_url,
            {"work": {"timeout": "30s", "retry": {"max_attempts": 4, **FAST}}},
        )
        await run_until_idle(tuned, db)  # a restart with the tuned config

        assert saga_row(db, saga)["state"] == "completed"  # no blocked_contract
        # s1 needed 3 attempts: more than the 2 it was enqueued with, within the live 4
        assert [(r.effect, r.attempt) for r in dest.requests] == [
            ("s1", 1),
            ("s1", 2),
            ("s1", 3),
            ("s2", 1),
        ]
        row = dispatch_of(db, saga, "s1")
        assert (row["timeout_ms"], row["max_attempts"]) == (30_000, 4)
        for attempt in attempts_of(db, saga, "s1"):  # each lease covered the live 30s timeout
            assert attempt["lease_expires_at"] - attempt["claimed_at"] >= timedelta(seconds=30)


async def test_a_budget_lowered_below_the_requests_made_sends_no_unknown_again(db: str) -> None:
    # max_attempts bounds the re-sending of a call that may have committed (at_least_once)
    with running(answer({("s1", "forward", None): UNKNOWN})) as dest:
        slow = {"max_attempts": 3, "initial_backoff": "1h", "max_backoff": "1h"}
        config = make_config(dest.base_url, {"work": {"retry": slow, "delivery": "at_least_once"}})
        saga = client_for(config, db).submit(serial_plan("b", ["work"]), execution_id="b-1").saga_id
        await run_until_idle(config, db)
        assert dispatch_of(db, saga, "s1")["state"] == "retry_wait"  # attempt 2 due in 1h
        fetch(
            db,
            "UPDATE effectus_saga_outbox SET next_attempt_at = now() WHERE saga_id = %s"
            " RETURNING dispatch_id",
            saga,
        )
        lowered = {**slow, "max_attempts": 1}
        lowered_config = make_config(
            dest.base_url, {"work": {"retry": lowered, "delivery": "at_least_once"}}
        )
        await run_until_idle(lowered_config, db)

        assert len(dest.requests) == 1  # claim 2 was made but not sent
        row = saga_row(db, saga)
        assert row["state"] == "blocked_unknown"
        assert "attempt 1 may have committed" in row["stop_reason"]


async def test_adopt_contract_moves_blocked_sagas_to_the_changed_path_audited(
    db: str, tmp_path: Path
) -> None:
    with running() as dest:
        config = make_config(dest.base_url, {"work": {}, "other": {}})
        client = client_for(config, db)
        one = client.submit(serial_plan("a", ["work", "work"]), execution_id="a-1").saga_id
        two = client.submit(serial_plan("a", ["work", "work"]), execution_id="a-2").saga_id
        three = client.submit(serial_plan("o", ["other"]), execution_id="a-3").saga_id
        moved = make_config(dest.base_url, {"work": {"path": "/v2/work"}, "other": {"version": 2}})
        await run_until_idle(moved, db)
        assert {saga_row(db, s)["state"] for s in (one, two, three)} == {"blocked_contract"}
        assert dest.requests == []  # the guard stopped each first call: nothing was sent
        live = config_file(tmp_path, moved, "moved")

        refused = cli(live, db, "adopt-contract", "--verb", "work")
        assert refused.exit_code == 3 and "--evidence" in refused.stderr
        unknown = cli(live, db, "adopt-contract", "--verb", "nope", "--evidence", "x")
        assert unknown.exit_code == 4 and "'nope'" in unknown.stderr
        assert cli(live, db, "adopt-contract", "--evidence", "x").exit_code == 3

        single = cli_json(
            live, db, "adopt-contract", one, "--evidence", "v2 is the same API", "--actor", ALICE
        )
        assert single["action"] == "adopt_contract"
        assert single["detail"]["verbs"] == ["work"]
        assert single["saga_state"] == {"from": "blocked_contract", "to": "running"}
        by_verb = cli_json(
            live,
            db,
            "adopt-contract",
            "--verb",
            "work",
            "--evidence",
            "rollout 42",
            "--actor",
            ALICE,
        )
        assert [r["saga_id"] for r in by_verb["adopted"]] == [two]
        assert [s["saga_id"] for s in by_verb["skipped"]] == [three]  # blocked on 'other'
        assert by_verb["refused"] == [] and by_verb["ok"] is True

        await run_until_idle(moved, db)
        assert [saga_row(db, s)["state"] for s in (one, two)] == ["completed", "completed"]
        assert saga_row(db, three)["state"] == "blocked_contract"
        assert {r.path for r in dest.requests} == {"/v2/work"}
        # the same key; the first request written under it (the guard's claim sent nothing)
        assert {(r.key, r.attempt) for r in dest.requests if r.effect == "s1"} == {
            (key(one, "s1"), 1),
            (key(two, "s1"), 1),
        }
        for saga, evidence in ((one, "v2 is the same API"), (two, "rollout 42")):
            [adopted] = events(db, saga, "contract_adopted")
            assert (adopted["actor"], adopted["evidence"]) == (ALICE, evidence)
            assert events(db, saga, "operator_adopt_contract")
        shown = cli_json(live, db, "sagas", "show", one)
        assert any(e["kind"] == "contract_adopted" for e in shown["timeline"])


async def test_a_saga_pinned_to_the_legacy_hash_of_a_verb_without_retry_table_still_runs(
    db: str,
) -> None:
    # the verb as configured before the retry defaults changed, with no retry table: a saga
    # an older release submitted pinned its legacy hash, which the new defaults must not move
    with running() as dest:
        verb = {"destination": "shipping", "path": "/ship"}
        config = make_config(
            dest.base_url,
            {"shipping.schedule": verb},
            destinations={"shipping": {"base_url": dest.base_url, "timeout": "2s"}},
        )
        client = client_for(config, db)
        saga = client.submit(
            serial_plan("legacy", ["shipping.schedule"]), execution_id="l-1"
        ).saga_id
        fetch(
            db,
            "UPDATE effectus_saga_outbox SET contract_hash = %s WHERE saga_id = %s"
            " RETURNING dispatch_id",
            LEGACY_WITHOUT_RETRY_TABLE,
            saga,
        )
        await run_until_idle(config, db)

        assert saga_row(db, saga)["state"] == "completed"  # not blocked_contract
        assert [r.headers["x-effectus-contract-hash"] for r in dest.requests] == [
            LEGACY_WITHOUT_RETRY_TABLE
        ]

"""Operator commands end to end: a real daemon blocks a saga against a real HTTP destination,
the CLI resolves, retries or cancels it, the daemon runs again, and the destination's requests
and the timeline say what happened. Plus the refusals, a real race, and prune's boundaries."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result

from effectusd.cli import main
from effectusd.config import Config, load_config
from effectusd.core.identity import idempotency_key
from effectusd.core.states import Direction
from tests.support.destination import Request, Response, ok, running
from tests.support.harness import (
    attempts_of,
    client_for,
    daemon_running,
    dispatch_of,
    fetch,
    make_config,
    run_until_idle,
    serial_plan,
    write_config_file,
)

pytestmark = pytest.mark.postgres

ALICE = "user:alice"


# -- helpers --------------------------------------------------------------------------------


def config_file(tmp_path: Path, config: Config, name: str = "live") -> Path:
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)
    path = write_config_file(folder, config)
    # the file must pin exactly the contracts of the in-process config it stands for
    loaded = load_config(path)
    assert {n: v.contract_hash for n, v in loaded.verbs.items()} == {
        n: v.contract_hash for n, v in config.verbs.items()
    }
    return path


def cli(config: Path, db: str, *args: str) -> Result:
    env = {"EFFECTUSD_CONFIG": None, "EFFECTUSD_DATABASE_URL": None}
    return CliRunner().invoke(main, ["--config", str(config), "--database-url", db, *args], env=env)


def cli_json(config: Path, db: str, *args: str, code: int = 0) -> dict[str, Any]:
    result = cli(config, db, *args, "--json")
    assert result.exit_code == code, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def events(db: str, saga: str, kind: str | None = None) -> list[dict[str, Any]]:
    rows = fetch(
        db, "SELECT * FROM effectus_saga_events WHERE saga_id = %s ORDER BY event_id", saga
    )
    return [row for row in rows if kind is None or row["kind"] == kind]


def saga_row(db: str, saga: str) -> dict[str, Any]:
    [row] = fetch(db, "SELECT * FROM effectus_saga_instances WHERE saga_id = %s", saga)
    return row


def answer(
    rules: dict[tuple[str, str, int | None], Response],
) -> Any:
    """A handler answering ``rules[(effect, direction, attempt)]`` (attempt None: any), else ok."""

    def handler(request: Request) -> Response:
        for key in (
            (request.effect, request.direction, request.attempt),
            (request.effect, request.direction, None),
        ):
            if key in rules:
                return rules[key]
        return ok(request)

    return handler


def by_verb(answers: dict[str, Response]) -> Any:
    """A handler answering by verb (the test config's path is "/VERB"), else ok."""

    def handler(request: Request) -> Response:
        return answers.get(request.path.lstrip("/")) or ok(request)

    return handler


UNKNOWN = Response(503, {"error": "upstream"})  # no outcome header: unknown_outcome
PERMANENT = Response(422, {"error": "no"}, {"X-Effectus-Outcome": "permanent_failure"})
STALE = Response(409, {"error": "stale"}, {"X-Effectus-Outcome": "stale_fence"})
NOT_NOW = Response(
    503, {"error": "busy"}, {"X-Effectus-Outcome": "retryable_failure_known_not_committed"}
)


def key(saga: str, effect: str, direction: Direction = Direction.FORWARD) -> str:
    return idempotency_key("default", saga, effect, direction)


# -- resolve --------------------------------------------------------------------------------


async def test_resolve_committed_settles_as_success_and_the_saga_moves_on(
    db: str, tmp_path: Path
) -> None:
    with running(answer({("s1", "forward", None): UNKNOWN})) as dest:
        config = make_config(dest.base_url, {"pay": {}, "ship": {}})
        client = client_for(config, db)
        plan = {
            "plan_id": "resolve-committed",
            "steps": [
                {"id": "s1", "verb": "pay", "args": {"n": 1}, "compensate": "none"},
                {
                    "id": "s2",
                    "verb": "ship",
                    "args": {"charge": {"$result": "s1", "path": "/charge"}},
                    "compensate": "none",
                },
            ],
        }
        saga = client.submit(plan, execution_id="r-1").saga_id
        await run_until_idle(config, db)
        assert saga_row(db, saga)["state"] == "blocked_unknown"

        report = cli_json(
            config_file(tmp_path, config),
            db,
            *("resolve", saga, "s1", "--committed", "--result", '{"charge": "c-1"}'),
            *("--evidence", "ledger has key for s1, charge c-1", "--actor", ALICE),
        )
        assert report["decision"] == "committed"
        assert report["saga_state"] == {"from": "blocked_unknown", "to": "running"}
        assert report["dispatch_state"] == {"from": "blocked_unknown", "to": "succeeded"}
        assert [e["effect_id"] for e in report["enqueued"]] == ["s2"]

        await run_until_idle(config, db)
        view = client.get(saga)
        assert view is not None and view.state == "completed"
        assert view.steps[0].result == {"charge": "c-1"}
        assert len(dest.seen("s1")) == 1  # --committed sends nothing
        [shipped] = dest.seen("s2")
        assert shipped.json() == {"charge": "c-1"}  # the operator's result feeds the next step
        [attempt] = attempts_of(db, saga, "s1")  # the attempt keeps what the call returned
        assert (attempt["outcome"], attempt["status_code"], attempt["settled_by"]) == (
            "unknown_outcome",
            503,
            "executor",
        )
        [resolved] = events(db, saga, "operator_resolve")
        assert (resolved["actor"], resolved["evidence"]) == (
            ALICE,
            "ledger has key for s1, charge c-1",
        )
        assert (resolved["from_state"], resolved["to_state"]) == ("blocked_unknown", "succeeded")
        settled = [e for e in events(db, saga, "attempt_settled") if e["actor"] == ALICE]
        assert [e["detail"]["settled_by"] for e in settled] == ["operator"]


async def test_resolve_not_committed_retry_sends_again_with_the_same_key(
    db: str, tmp_path: Path
) -> None:
    with running(answer({("s1", "forward", 1): UNKNOWN})) as dest:
        config = make_config(dest.base_url, {"pay": {"retry": {"max_attempts": 2}}})
        client = client_for(config, db)
        saga = client.submit(serial_plan("resolve-retry", ["pay"]), execution_id="r-2").saga_id
        await run_until_idle(config, db)
        assert dispatch_of(db, saga, "s1")["uncertain_attempt"] == 1

        report = cli_json(
            config_file(tmp_path, config),
            db,
            *("resolve", saga, "s1", "--not-committed", "--retry"),
            *("--evidence", "no record of the key at the destination", "--actor", ALICE),
        )
        assert report["dispatch_state"] == {"from": "blocked_unknown", "to": "retry_wait"}
        dispatch = dispatch_of(db, saga, "s1")
        assert dispatch["uncertain_attempt"] is None
        assert dispatch["max_attempts"] == 1 + 2  # attempts made + a fresh budget

        await run_until_idle(config, db)
        assert saga_row(db, saga)["state"] == "completed"
        assert [r.attempt for r in dest.requests] == [1, 2]
        assert {r.key for r in dest.requests} == {key(saga, "s1")}
        [resolved] = events(db, saga, "operator_resolve")
        assert resolved["detail"]["decision"] == "not_committed_retry"
        assert resolved["evidence"] == "no record of the key at the destination"


async def test_resolve_not_committed_fail_compensates_what_succeeded(
    db: str, tmp_path: Path
) -> None:
    with running(answer({("s2", "forward", None): UNKNOWN})) as dest:
        config = make_config(dest.base_url, {"do": {}, "undo": {}})
        client = client_for(config, db)
        plan = serial_plan("resolve-fail", ["do", "do"], compensate={"s1": "undo"})
        saga = client.submit(plan, execution_id="r-3").saga_id
        await run_until_idle(config, db)
        assert saga_row(db, saga)["state"] == "blocked_unknown"

        report = cli_json(
            config_file(tmp_path, config),
            db,
            *("resolve", saga, "s2", "--not-committed", "--fail"),
            *("--evidence", "destination says 404 for the key", "--actor", ALICE),
        )
        assert report["saga_state"] == {"from": "blocked_unknown", "to": "compensating"}
        assert report["dispatch_state"]["to"] == "failed_permanent"

        await run_until_idle(config, db)
        view = client.get(saga)
        assert view is not None and view.state == "compensated"
        assert "known not committed" in view.stop_reason
        assert [s.state for s in view.steps] == ["compensated", "failed"]
        assert [(r.effect, r.direction) for r in dest.requests] == [
            ("s1", "forward"),
            ("s2", "forward"),
            ("s1", "compensation"),
        ]


async def test_resolve_compensation_not_committed_fail_blocks_then_retry_compensates(
    db: str, tmp_path: Path
) -> None:
    rules = {("s2", "forward", None): PERMANENT, ("s1", "compensation", 1): UNKNOWN}
    with running(answer(rules)) as dest:
        config = make_config(dest.base_url, {"do": {}, "undo": {}})
        client = client_for(config, db)
        plan = serial_plan("resolve-comp", ["do", "do"], compensate={"s1": "undo"})
        saga = client.submit(plan, execution_id="r-4").saga_id
        await run_until_idle(config, db)
        assert saga_row(db, saga)["state"] == "blocked_unknown"
        live = config_file(tmp_path, config)

        report = cli_json(
            live,
            db,
            *("resolve", saga, "s1", "--direction", "compensation", "--not-committed", "--fail"),
            *("--evidence", "refund not found", "--actor", ALICE),
        )
        assert report["saga_state"] == {"from": "blocked_unknown", "to": "blocked_compensation"}

        report = cli_json(
            live, db, "retry", saga, "--evidence", "refunds back up", "--actor", ALICE
        )
        assert report["saga_state"] == {"from": "blocked_compensation", "to": "compensating"}
        await run_until_idle(config, db)
        row = saga_row(db, saga)
        # compensated keeps the reason compensation began, not the block's
        assert row["state"] == "compensated" and row["stop_reason"].startswith("step 's2' failed")
        undo = dest.seen("s1", "compensation")
        assert [r.attempt for r in undo] == [1, 2]
        assert {r.key for r in undo} == {key(saga, "s1", Direction.COMPENSATION)}


# -- retry ----------------------------------------------------------------------------------


async def test_retry_blocked_fence_sends_again_with_a_newer_token(db: str, tmp_path: Path) -> None:
    with running(answer({("s1", "forward", 1): STALE})) as dest:
        config = make_config(dest.base_url, {"pay": {"fencing": ["account:{args.n}"]}})
        client = client_for(config, db)
        saga = client.submit(serial_plan("fence", ["pay"]), execution_id="f-1").saga_id
        await run_until_idle(config, db)
        assert saga_row(db, saga)["state"] == "blocked_fence"

        report = cli_json(
            config_file(tmp_path, config),
            db,
            *("retry", saga, "--evidence", "old holder is gone", "--actor", ALICE),
        )
        assert report["dispatch_state"] == {"from": "blocked_fence", "to": "retry_wait"}
        assert report["saga_state"] == {"from": "blocked_fence", "to": "running"}

        await run_until_idle(config, db)
        assert saga_row(db, saga)["state"] == "completed"
        assert [r.attempt for r in dest.requests] == [1, 2]
        assert {r.key for r in dest.requests} == {key(saga, "s1")}
        tokens = [json.loads(r.headers["x-effectus-fencing-grants"]) for r in dest.requests]
        assert tokens[1][0]["token"] > tokens[0][0]["token"]
        [retried] = events(db, saga, "operator_retry")
        assert (retried["actor"], retried["evidence"]) == (ALICE, "old holder is gone")


async def test_retry_blocked_contract_refused_while_drifted_then_sent_once_restored(
    db: str, tmp_path: Path
) -> None:
    with running() as dest:
        config = make_config(dest.base_url, {"work": {}})
        client = client_for(config, db)
        saga = client.submit(serial_plan("drift", ["work"]), execution_id="c-1").saga_id
        drifted = make_config(dest.base_url, {"work": {"version": 2}})
        await run_until_idle(drifted, db)
        assert saga_row(db, saga)["state"] == "blocked_contract"

        refused = cli(config_file(tmp_path, drifted, "drifted"), db, "retry", saga)
        assert refused.exit_code == 4, refused.output
        assert "'work'" in refused.stderr
        assert dispatch_of(db, saga, "s1")["state"] == "blocked_contract"  # nothing changed

        result = cli(config_file(tmp_path, config), db, "retry", saga, "--actor", ALICE)
        assert result.exit_code == 0, result.output
        await run_until_idle(config, db)
        assert saga_row(db, saga)["state"] == "completed"
        # claim 1 was stopped by the guard and never sent: the one request written is
        # request 1 (X-Effectus-Attempt counts requests, not claims)
        [request] = dest.requests
        assert (request.attempt, request.key) == (1, key(saga, "s1"))


async def test_retry_blocked_contract_at_enqueue_time_builds_the_dispatch_now(
    db: str, tmp_path: Path
) -> None:
    with running() as dest:
        config = make_config(dest.base_url, {"work": {}, "other": {}})
        client = client_for(config, db)
        saga = client.submit(serial_plan("late-drift", ["work", "other"]), execution_id="c-2")
        drifted = make_config(dest.base_url, {"work": {}, "other": {"version": 2}})
        await run_until_idle(drifted, db)
        row = saga_row(db, saga.saga_id)
        assert row["state"] == "blocked_contract" and "'other'" in row["stop_reason"]
        assert not fetch(
            db, "SELECT 1 FROM effectus_saga_outbox WHERE effect_id = 's2'"
        )  # blocked before its dispatch existed

        refused = cli(config_file(tmp_path, drifted, "drifted"), db, "retry", saga.saga_id)
        assert refused.exit_code == 4 and "'other'" in refused.stderr

        report = cli_json(config_file(tmp_path, config), db, "retry", saga.saga_id)
        assert report["decision"] == "enqueue"
        assert report["saga_state"] == {"from": "blocked_contract", "to": "running"}
        assert [e["effect_id"] for e in report["enqueued"]] == ["s2"]
        await run_until_idle(config, db)
        assert saga_row(db, saga.saga_id)["state"] == "completed"
        assert [(r.effect, r.attempt) for r in dest.requests] == [("s1", 1), ("s2", 1)]


async def test_retry_blocked_compensation_sends_the_compensation_again(
    db: str, tmp_path: Path
) -> None:
    rules = {("s2", "forward", None): PERMANENT, ("s1", "compensation", 1): PERMANENT}
    with running(answer(rules)) as dest:
        config = make_config(dest.base_url, {"do": {}, "undo": {"retry": {"max_attempts": 3}}})
        client = client_for(config, db)
        plan = serial_plan("comp", ["do", "do"], compensate={"s1": "undo"})
        saga = client.submit(plan, execution_id="b-1").saga_id
        await run_until_idle(config, db)
        assert saga_row(db, saga)["state"] == "blocked_compensation"

        report = cli_json(config_file(tmp_path, config), db, "retry", saga, "--actor", ALICE)
        assert report["dispatch_state"] == {"from": "failed_permanent", "to": "retry_wait"}
        assert dispatch_of(db, saga, "s1", "compensation")["max_attempts"] == 1 + 3

        await run_until_idle(config, db)
        row = saga_row(db, saga)
        # compensated keeps the reason compensation began, not the block's
        assert row["state"] == "compensated" and row["stop_reason"].startswith("step 's2' failed")
        undo = dest.seen("s1", "compensation")
        assert [r.attempt for r in undo] == [1, 2]
        assert {r.key for r in undo} == {key(saga, "s1", Direction.COMPENSATION)}


# -- cancel ---------------------------------------------------------------------------------


async def test_cancel_a_retry_waiting_step_compensates_now(db: str, tmp_path: Path) -> None:
    with running(answer({("s2", "forward", None): NOT_NOW})) as dest:
        slow_retry = {"retry": {"initial_backoff": "1h", "max_backoff": "2h"}}
        config = make_config(dest.base_url, {"do": {}, "undo": {}, "slow": slow_retry})
        client = client_for(config, db)
        plan = serial_plan("cancel-wait", ["do", "slow"], compensate={"s1": "undo"})
        saga = client.submit(plan, execution_id="k-1").saga_id
        await run_until_idle(config, db)  # s2 now waits an hour for its retry
        assert dispatch_of(db, saga, "s2")["state"] == "retry_wait"

        report = cli_json(
            config_file(tmp_path, config),
            db,
            *("cancel", saga, "--evidence", "customer withdrew", "--actor", "user:carol"),
        )
        assert report["decision"] == "cancel_now"
        assert report["dispatch_state"] == {"from": "retry_wait", "to": "canceled"}
        assert report["saga_state"] == {"from": "running", "to": "compensating"}

        await run_until_idle(config, db)
        view = client.get(saga)
        assert view is not None and view.state == "compensated"
        assert view.stop_reason == "canceled by user:carol: customer withdrew"
        assert view.cancel_requested_by == "user:carol"
        assert [s.state for s in view.steps] == ["compensated", "pending"]
        assert dispatch_of(db, saga, "s2")["state"] == "canceled"
        assert [(r.effect, r.direction) for r in dest.requests] == [
            ("s1", "forward"),
            ("s2", "forward"),
            ("s1", "compensation"),
        ]
        [canceled] = events(db, saga, "operator_cancel")
        assert (canceled["actor"], canceled["evidence"]) == ("user:carol", "customer withdrew")


async def test_cancel_before_anything_was_claimed_ends_compensated(db: str, tmp_path: Path) -> None:
    with running() as dest:
        config = make_config(dest.base_url, {"do": {}})
        client = client_for(config, db)
        later = datetime.now(UTC) + timedelta(hours=1)
        saga = client.submit(
            serial_plan("cancel-queued", ["do"]), execution_id="k-2", not_before=later
        ).saga_id

        report = cli_json(config_file(tmp_path, config), db, "cancel", saga, "--actor", ALICE)
        assert report["saga_state"] == {"from": "running", "to": "compensated"}
        await run_until_idle(config, db)
        assert dest.requests == []
        row = saga_row(db, saga)
        assert (row["state"], row["stop_reason"]) == ("compensated", f"canceled by {ALICE}")
        [canceled] = events(db, saga, "operator_cancel")
        assert canceled["detail"]["never_claimed"] is True
        [dispatch] = fetch(
            db, "SELECT state, attempt FROM effectus_saga_outbox WHERE saga_id = %s", saga
        )
        assert (dispatch["state"], dispatch["attempt"]) == ("canceled", 0)  # kept as evidence


async def test_cancel_in_flight_only_flags_and_the_engine_compensates_after_success(
    db: str, tmp_path: Path
) -> None:
    received = threading.Event()
    release = threading.Event()

    def stall_s1(request: Request) -> Response:
        if request.effect == "s1" and request.direction == "forward":
            received.set()
            return Response(200, {"ok": True}, stall=release)
        return ok(request)

    with running(stall_s1) as dest:
        config = make_config(dest.base_url, {"do": {"timeout": "20s"}, "undo": {}})
        client = client_for(config, db)
        plan = serial_plan("cancel-flight", ["do", "do"], compensate={"s1": "undo"})
        saga = client.submit(plan, execution_id="k-3").saga_id
        live = config_file(tmp_path, config)
        try:
            async with daemon_running(config, db):
                assert await asyncio.to_thread(received.wait, 20)
                first = await asyncio.to_thread(cli, live, db, "cancel", saga, "--json")
                assert first.exit_code == 0, first.output
                assert json.loads(first.stdout)["decision"] == "flag_only"
                again = await asyncio.to_thread(cli, live, db, "cancel", saga)
                assert again.exit_code == 4 and "already requested" in again.stderr
                release.set()
                view = await asyncio.to_thread(client.wait, saga, 30)
        finally:
            release.set()
        assert view.state == "compensated"
        assert view.stop_reason == "canceled on request"
        assert [(r.effect, r.direction) for r in dest.requests] == [
            ("s1", "forward"),
            ("s1", "compensation"),
        ]


# -- refusals -------------------------------------------------------------------------------


async def test_refusals_name_the_state_and_change_nothing(db: str, tmp_path: Path) -> None:
    with running(by_verb({"pay": UNKNOWN})) as dest:
        config = make_config(dest.base_url, {"pay": {}, "work": {}})
        client = client_for(config, db)
        blocked = client.submit(serial_plan("blk", ["pay"]), execution_id="n-1").saga_id
        done = client.submit(serial_plan("done", ["work"]), execution_id="n-2").saga_id
        await run_until_idle(config, db)
        live = config_file(tmp_path, config)
        before = (saga_row(db, blocked), saga_row(db, done))

        def expect(code: int, text: str, *args: str) -> None:
            result = cli(live, db, *args)
            assert result.exit_code == code, result.output
            assert text in result.stderr, result.stderr

        evidence = ("--evidence", "checked")
        expect(4, "is completed", "resolve", done, "s1", "--committed", *evidence)
        expect(5, "no effect 'nope'", "resolve", blocked, "nope", "--committed", *evidence)
        expect(5, "not found", "resolve", "f" * 64, "s1", "--committed", *evidence)
        expect(3, "--evidence", "resolve", blocked, "s1", "--committed")
        expect(3, "--evidence", "resolve", blocked, "s1", "--committed", "--evidence", " ")
        expect(
            3, "malformed JSON", "resolve", blocked, "s1", "--committed", "--result", "{", *evidence
        )
        expect(
            3,
            "exactly one of --retry or --fail",
            "resolve",
            blocked,
            "s1",
            "--not-committed",
            *evidence,
        )
        expect(4, "is completed: nothing to cancel", "cancel", done)
        expect(4, "resolve or retry it first", "cancel", blocked)
        expect(4, "is blocked_unknown", "retry", blocked)
        expect(5, "not found", "cancel", "f" * 64)
        refused = cli_json(live, db, "cancel", done, code=4)
        assert refused == {
            "ok": False,
            "refused": "conflict",
            "error": f"saga {done} is completed: nothing to cancel",
        }
        assert (saga_row(db, blocked), saga_row(db, done)) == before
        assert not [e for e in events(db, blocked) if e["kind"].startswith("operator_")]


def _resolve_in_process(config: Path, db: str, saga: str, decision: list[str]) -> Any:
    return subprocess.run(
        [
            sys.executable,
            *("-m", "effectusd.cli", "--config", str(config), "--database-url", db),
            *("resolve", saga, "s1", *decision, "--evidence", "race"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_two_racing_resolutions_one_wins_the_other_is_refused(
    db: str, tmp_path: Path
) -> None:
    with running(answer({("s1", "forward", None): UNKNOWN})) as dest:
        config = make_config(dest.base_url, {"pay": {}})
        client = client_for(config, db)
        saga = client.submit(serial_plan("race", ["pay"]), execution_id="z-1").saga_id
        await run_until_idle(config, db)
        live = config_file(tmp_path, config)

        results: dict[str, Any] = {}
        decisions = {"committed": ["--committed"], "retry": ["--not-committed", "--retry"]}
        with psycopg.connect(db) as holder:
            # Hold the saga row, start both, let them queue up on it, then let go.
            holder.execute(
                "SELECT 1 FROM effectus_saga_instances WHERE saga_id = %s FOR UPDATE", (saga,)
            )
            threads = [
                threading.Thread(
                    target=lambda n=name, d=flags: results.__setitem__(
                        n, _resolve_in_process(live, db, saga, d)
                    )
                )
                for name, flags in decisions.items()
            ]
            for thread in threads:
                thread.start()
            deadline = time.monotonic() + 30
            while _waiting_on_locks(db) < 2:
                assert time.monotonic() < deadline, "the two resolutions never queued up"
                await asyncio.sleep(0.02)
            holder.rollback()
        for thread in threads:
            await asyncio.to_thread(thread.join, 60)

        codes = sorted(r.returncode for r in results.values())
        assert codes == [0, 4], {n: (r.returncode, r.stderr) for n, r in results.items()}
        [loser] = [r for r in results.values() if r.returncode == 4]
        state = saga_row(db, saga)["state"]
        assert state in ("completed", "running")
        assert f"is {state}" in loser.stderr
        assert len(events(db, saga, "operator_resolve")) == 1


def _waiting_on_locks(db: str) -> int:
    rows = fetch(
        db,
        "SELECT count(*) AS n FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'",
    )
    return int(rows[0]["n"])


# -- prune ----------------------------------------------------------------------------------


async def test_prune_deletes_only_finished_sagas_older_than_the_cutoff(
    db: str, tmp_path: Path
) -> None:
    with running(by_verb({"pay": UNKNOWN, "bad": PERMANENT})) as dest:
        verbs: dict[str, Any] = {"pay": {}, "do": {}, "undo": {}, "bad": {}}
        config = make_config(dest.base_url, verbs)
        client = client_for(config, db)

        def submit(name: str, plan: dict[str, Any], **kwargs: Any) -> str:
            return client.submit(plan, execution_id=name, **kwargs).saga_id

        ids = {
            "old_completed": submit("p-1", serial_plan("ok", ["do"])),
            "old_compensated": submit(
                "p-2", serial_plan("comp", ["do", "bad"], compensate={"s1": "undo"})
            ),
            "old_failed": submit("p-3", serial_plan("fail", ["bad"])),
            "new_completed": submit("p-4", serial_plan("ok", ["do"])),
            "old_blocked": submit("p-5", serial_plan("blk", ["pay"])),
            "old_running": submit(
                "p-6",
                serial_plan("later", ["do"]),
                not_before=datetime.now(UTC) + timedelta(days=1),
            ),
        }
        await run_until_idle(config, db)
    states = {name: saga_row(db, saga)["state"] for name, saga in ids.items()}
    assert states == {
        "old_completed": "completed",
        "old_compensated": "compensated",
        "old_failed": "failed",
        "new_completed": "completed",
        "old_blocked": "blocked_unknown",
        "old_running": "running",
    }
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("UPDATE effectus_saga_instances SET created_at = now() - interval '30 days'")
        conn.execute(
            "UPDATE effectus_saga_instances SET finished_at = now() - interval '7 days 1 hour'"
            " WHERE finished_at IS NOT NULL AND saga_id <> %s",
            (ids["new_completed"],),
        )
        conn.execute(
            "UPDATE effectus_saga_instances SET finished_at = now() - interval '6 days 23 hours'"
            " WHERE saga_id = %s",
            (ids["new_completed"],),
        )
    live = config_file(tmp_path, config)
    old = {ids["old_completed"], ids["old_compensated"], ids["old_failed"]}

    preview = cli_json(live, db, "prune", "--older-than", "7d", "--dry-run")
    assert preview["count"] == 3 and {s["saga_id"] for s in preview["sagas"]} == old
    assert len(fetch(db, "SELECT saga_id FROM effectus_saga_instances")) == 6  # dry run

    report = cli_json(live, db, "prune", "--older-than", "7d", "--batch-size", "2")
    assert (report["count"], report["batches"]) == (3, 2)
    assert sum(report["by_state"].values()) == 3
    left = {row["saga_id"] for row in fetch(db, "SELECT saga_id FROM effectus_saga_instances")}
    assert left == set(ids.values()) - old
    for table in ("effectus_saga_steps", "effectus_saga_outbox", "effectus_saga_events"):
        orphans = fetch(db, f"SELECT 1 FROM {table} WHERE saga_id = ANY(%s)", list(old))
        assert orphans == [], table
    assert not fetch(
        db,
        "SELECT 1 FROM effectus_saga_attempts a WHERE NOT EXISTS"
        " (SELECT 1 FROM effectus_saga_outbox o WHERE o.dispatch_id = a.dispatch_id)",
    )

    again = cli_json(live, db, "prune", "--older-than", "7d")
    assert (again["count"], again["batches"]) == (0, 0)
    bad = cli(live, db, "prune", "--older-than", "soon")
    assert bad.exit_code == 3 and "--older-than" in bad.stderr

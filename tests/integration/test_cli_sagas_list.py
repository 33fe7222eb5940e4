"""`sagas list --blocked`: every saga waiting for a person, whichever blocked state holds it, on
both stores; `--state blocked` points at it."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import psycopg

from effectusd.core.states import SagaState
from tests.integration.test_operator import cli, config_file
from tests.support import backends
from tests.support.harness import client_for, make_config, serial_plan


def set_state(url: str, saga: str, state: SagaState) -> None:
    """Put ``saga`` in ``state`` as the engine would leave it (a reason; finished if terminal)."""
    update = (
        "UPDATE effectus_saga_instances SET state = {p}, stop_reason = 'set by the test',"
        " finished_at = CASE WHEN {p} THEN created_at END WHERE saga_id = {p}"
    )
    params = (state.value, state.is_terminal, saga)
    if backends.is_sqlite(url):
        with sqlite3.connect(backends.sqlite_path(url)) as conn:
            conn.execute(update.format(p="?"), params)
    else:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(update.format(p="%s"), params)  # type: ignore[arg-type]


def test_blocked_lists_every_blocked_state_and_nothing_else(store_url: str, tmp_path: Path) -> None:
    config = make_config("http://127.0.0.1:9", {"do": {}})
    client = client_for(config, store_url)
    by_state = {}
    for state in SagaState:  # one saga in each state, a blocked_* state added later included
        saga = client.submit(serial_plan("p", ["do"]), execution_id=f"in-{state.value}").saga_id
        set_state(store_url, saga, state)
        by_state[state] = saga
    live = config_file(tmp_path, config)

    result = cli(live, store_url, "sagas", "list", "--blocked", "--json")

    assert result.exit_code == 0, result.output
    listed = {row["saga_id"]: row["state"] for row in json.loads(result.stdout)}
    assert listed == {
        saga: state.value for state, saga in by_state.items() if state.value.startswith("blocked_")
    }
    assert len(listed) >= 4
    text = cli(live, store_url, "sagas", "list", "--blocked")
    assert text.exit_code == 0 and len(text.stdout.splitlines()) == 1 + len(listed)


def test_blocked_takes_the_other_filters_and_not_state(store_url: str, tmp_path: Path) -> None:
    config = make_config("http://127.0.0.1:9", {"do": {}, "other": {}})
    client = client_for(config, store_url)
    mine = client.submit(serial_plan("mine", ["do"]), execution_id="m-1").saga_id
    theirs = client.submit(serial_plan("theirs", ["other"]), execution_id="t-1").saga_id
    for saga in (mine, theirs):
        set_state(store_url, saga, SagaState.BLOCKED_FENCE)
    live = config_file(tmp_path, config)

    one = cli(live, store_url, "sagas", "list", "--blocked", "--plan", "mine", "--json")
    both = cli(live, store_url, "sagas", "list", "--blocked", "--state", "blocked_fence")
    word = cli(live, store_url, "sagas", "list", "--state", "blocked")

    assert [row["saga_id"] for row in json.loads(one.stdout)] == [mine]
    assert both.exit_code == 2 and "give one of them" in both.stderr
    assert word.exit_code == 2 and "--blocked lists every blocked state" in word.stderr

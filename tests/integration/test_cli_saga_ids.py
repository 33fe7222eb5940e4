"""Every command that takes a saga id takes what `sagas list` prints: the unique start of the id,
with or without its "…". It acts on the full id, records it on the timeline and prints it; a
start that fits several sagas is refused naming them (exit 2), one that fits none exits 5, and
neither writes anything. On both stores."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from effectusd.config import Config
from tests.integration.test_operator import (
    ALICE,
    PERMANENT,
    UNKNOWN,
    answer,
    cli,
    config_file,
    events,
    saga_row,
)
from tests.support.destination import running
from tests.support.harness import client_for, fetch, make_config, run_until_idle, serial_plan

EVIDENCE = ("--evidence", "checked by hand", "--actor", ALICE)


def listed(live: Path, url: str, saga: str) -> str:
    """The saga's id as `sagas list` prints it: its first characters and "…"."""
    lines = cli(live, url, "sagas", "list").stdout.splitlines()[1:]
    [shown] = [line.split()[0] for line in lines if saga.startswith(line.split()[0][:-1])]
    assert shown.endswith("…") and len(shown) < len(saga)
    return shown


def acted_on(result: Any, saga: str) -> None:
    """The command worked and printed the full id of the saga it acted on."""
    assert result.exit_code == 0, result.output
    assert f"saga      {saga}  " in result.stdout


# -- each command acts on the saga a prefix names ---------------------------------------------


async def test_resolve_takes_the_prefix_sagas_list_prints(store_url: str, tmp_path: Path) -> None:
    with running(answer({("s1", "forward", None): UNKNOWN})) as dest:
        config = make_config(dest.base_url, {"pay": {}})
        saga = (
            client_for(config, store_url)
            .submit(serial_plan("r", ["pay"]), execution_id="r-1")
            .saga_id
        )
        await run_until_idle(config, store_url)
        assert saga_row(store_url, saga)["state"] == "blocked_unknown"
        live = config_file(tmp_path, config)

        result = cli(
            live, store_url, "resolve", listed(live, store_url, saga), "s1", "--committed",
            *EVIDENCE,
        )  # fmt: skip

        acted_on(result, saga)
        assert saga_row(store_url, saga)["state"] == "completed"
        [resolved] = events(store_url, saga, "operator_resolve")
        assert (resolved["actor"], resolved["evidence"]) == (ALICE, "checked by hand")


async def test_retry_takes_the_prefix_sagas_list_prints(store_url: str, tmp_path: Path) -> None:
    rules = {("s2", "forward", None): PERMANENT, ("s1", "compensation", 1): PERMANENT}
    with running(answer(rules)) as dest:
        config = make_config(dest.base_url, {"do": {}, "undo": {}})
        plan = serial_plan("b", ["do", "do"], compensate={"s1": "undo"})
        saga = client_for(config, store_url).submit(plan, execution_id="b-1").saga_id
        await run_until_idle(config, store_url)
        assert saga_row(store_url, saga)["state"] == "blocked_compensation"
        live = config_file(tmp_path, config)

        result = cli(live, store_url, "retry", listed(live, store_url, saga)[:-1], *EVIDENCE)

        acted_on(result, saga)
        [retried] = events(store_url, saga, "operator_retry")
        assert (retried["actor"], retried["evidence"]) == (ALICE, "checked by hand")
        await run_until_idle(config, store_url)
        assert saga_row(store_url, saga)["state"] == "compensated"


async def test_cancel_takes_the_prefix_sagas_list_prints(store_url: str, tmp_path: Path) -> None:
    config = make_config("http://127.0.0.1:9", {"do": {}})
    saga = (
        client_for(config, store_url).submit(serial_plan("k", ["do"]), execution_id="k-1").saga_id
    )
    live = config_file(tmp_path, config)

    result = cli(live, store_url, "cancel", listed(live, store_url, saga).upper(), *EVIDENCE)

    acted_on(result, saga)
    assert saga_row(store_url, saga)["state"] == "compensated"
    [canceled] = events(store_url, saga, "operator_cancel")
    assert (canceled["actor"], canceled["evidence"]) == (ALICE, "checked by hand")


async def test_adopt_contract_takes_the_prefix_sagas_list_prints(
    store_url: str, tmp_path: Path
) -> None:
    with running() as dest:
        config = make_config(dest.base_url, {"work": {}})
        saga = (
            client_for(config, store_url)
            .submit(serial_plan("a", ["work"]), execution_id="a-1")
            .saga_id
        )
        moved = make_config(dest.base_url, {"work": {"path": "/v2/work"}})
        await run_until_idle(moved, store_url)
        assert saga_row(store_url, saga)["state"] == "blocked_contract"
        live = config_file(tmp_path, moved)

        result = cli(live, store_url, "adopt-contract", listed(live, store_url, saga), *EVIDENCE)

        acted_on(result, saga)
        [adopted] = events(store_url, saga, "contract_adopted")
        assert (adopted["actor"], adopted["evidence"]) == (ALICE, "checked by hand")
        await run_until_idle(moved, store_url)
        assert saga_row(store_url, saga)["state"] == "completed"


# -- a prefix that fits several sagas, or none -------------------------------------------------

COMMANDS = {
    "resolve": ["resolve", "{id}", "s1", "--committed", *EVIDENCE],
    "retry": ["retry", "{id}", *EVIDENCE],
    "cancel": ["cancel", "{id}", *EVIDENCE],
    "adopt-contract": ["adopt-contract", "{id}", *EVIDENCE],
    "sagas-show": ["sagas", "show", "{id}"],
}


def command(name: str, saga: str) -> list[str]:
    return [saga if arg == "{id}" else arg for arg in COMMANDS[name]]


def sharing_a_first_digit(config: Config, url: str) -> list[str]:
    """Submit sagas until two ids start with the same hex digit (at most 17: 16 digits)."""
    client = client_for(config, url)
    ids: list[str] = []
    while not any(sum(other[0] == saga[0] for other in ids) > 1 for saga in ids):
        ids.append(
            client.submit(serial_plan("p", ["do"]), execution_id=f"order-{len(ids)}").saga_id
        )
    first = next(saga[0] for saga in ids if sum(other[0] == saga[0] for other in ids) > 1)
    return sorted(saga for saga in ids if saga[0] == first)


def written(url: str) -> list[dict[str, Any]]:
    return fetch(
        url,
        "SELECT saga_id, state, (SELECT count(*) FROM effectus_saga_events e"
        " WHERE e.saga_id = s.saga_id) AS events FROM effectus_saga_instances s ORDER BY saga_id",
    )


@pytest.mark.parametrize("name", COMMANDS)
def test_an_ambiguous_prefix_exits_2_naming_the_candidates_and_writes_nothing(
    store_url: str, tmp_path: Path, name: str
) -> None:
    config = make_config("http://127.0.0.1:9", {"do": {}})
    sharing = sharing_a_first_digit(config, store_url)
    live = config_file(tmp_path, config)
    before = written(store_url)

    result = cli(live, store_url, *command(name, sharing[0][0]))

    assert result.exit_code == 2, result.output
    assert f"saga id prefix {sharing[0][0]} is ambiguous" in result.stderr
    assert "give more of the saga id" in result.stderr
    for saga in sharing:
        assert saga in result.stderr
    assert written(store_url) == before


@pytest.mark.parametrize("name", sorted(set(COMMANDS) - {"sagas-show"}))
def test_an_ambiguous_prefix_answers_json_as_a_refusal(
    store_url: str, tmp_path: Path, name: str
) -> None:
    config = make_config("http://127.0.0.1:9", {"do": {}})
    sharing = sharing_a_first_digit(config, store_url)

    result = cli(config_file(tmp_path, config), store_url, *command(name, sharing[0][0]), "--json")

    assert result.exit_code == 2, result.output
    refusal = json.loads(result.stdout)
    assert (refusal["ok"], refusal["refused"]) == (False, "ambiguous")
    assert all(saga in refusal["error"] for saga in sharing)


@pytest.mark.parametrize("name", COMMANDS)
def test_a_prefix_no_saga_id_starts_with_exits_5_and_one_not_hex_exits_2(
    store_url: str, tmp_path: Path, name: str
) -> None:
    config = make_config("http://127.0.0.1:9", {"do": {}})
    saga = (
        client_for(config, store_url).submit(serial_plan("p", ["do"]), execution_id="o-1").saga_id
    )
    live = config_file(tmp_path, config)
    other = next(digit for digit in "0123456789abcdef" if digit != saga[0]) * 6
    before = written(store_url)

    missing = cli(live, store_url, *command(name, other))
    not_hex = cli(live, store_url, *command(name, "order-1"))

    assert missing.exit_code == 5, missing.output
    assert f"no saga id starts with {other}" in missing.stderr
    assert not_hex.exit_code == 2 and "SAGA_ID" in not_hex.stderr
    assert written(store_url) == before


@pytest.mark.parametrize(
    "args",
    [
        ["resolve", "ffff", "s1", "--committed"],  # no --evidence
        ["resolve", "ffff", "s1", "--not-committed"],  # neither --retry nor --fail
        ["adopt-contract", "ffff"],  # no --evidence
    ],
)
def test_a_commands_own_input_is_checked_before_the_saga_is_looked_for(
    store_url: str, tmp_path: Path, args: list[str]
) -> None:
    config = make_config("http://127.0.0.1:9", {"do": {}})

    result = cli(config_file(tmp_path, config), store_url, *args)

    assert result.exit_code == 3, result.output

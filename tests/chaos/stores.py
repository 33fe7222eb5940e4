"""The chaos row with several stores: each daemon process serves every store
(``[database.stores]``), daemons die at every fault point and from outside, and each store's
sagas run under the same execution ids (``c-0`` …) in their own namespaces, so the kit sees
every key once per store. The invariants are checked store by store against the one
destination's rows: 0 duplicates, 0 lost."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from tests.chaos import runner, topology
from tests.chaos.scenarios import Report, Scenario


def labels(scenario: Scenario) -> list[str]:
    return [f"s{index}" for index in range(scenario.stores)]


def config_text(ports: dict[str, int], scenario: Scenario, urls: dict[str, str]) -> str:
    tables = "".join(
        f'[database.stores.{label}]\nurl = "{url}"\nnamespace = "chaos-{label}"\n'
        for label, url in urls.items()
    )
    return topology.config_text(ports, scenario) + tables


def _submit(config: Path, urls: dict[str, str], scenario: Scenario) -> None:
    from effectusd.client import Client, Submission
    from effectusd.config import load_config

    loaded = load_config(config)
    for label, url in urls.items():
        store = loaded.model_copy(update={"namespace": f"chaos-{label}"})
        Client(store, database_url=url).submit_many(
            Submission(plan, execution_id=execution_id)
            for execution_id, plan in (topology.plan(scenario, i) for i in range(scenario.sagas))
        )


def _outstanding(urls: dict[str, str]) -> int:
    return sum(runner._outstanding(url) for url in urls.values())


def _drive(
    scenario: Scenario,
    daemons: runner.Daemons,
    urls: dict[str, str],
    started: float,
    rng: random.Random,
) -> None:
    kills_left = scenario.external_kills
    while time.monotonic() - started < scenario.timeout_s:
        daemons.tend()
        if _outstanding(urls) == 0:
            return
        if kills_left and rng.random() < 0.3:
            daemons.kill_one()
            kills_left -= 1
        time.sleep(0.2)


@contextmanager
def _databases(scenario: Scenario) -> Iterator[dict[str, str]]:
    with ExitStack() as stack:
        urls = {
            label: stack.enter_context(runner._database(f"effectusd_chaos_{label}"))
            for label in labels(scenario)
        }
        for url in urls.values():
            runner._migrate(url)
        yield urls


def run(scenario: Scenario, rng: random.Random) -> Report:
    report = Report(scenario.name, sagas=scenario.sagas * scenario.stores)
    started = time.monotonic()
    with ExitStack() as stack:
        urls = stack.enter_context(_databases(scenario))
        dest_url = stack.enter_context(runner._database("effectusd_chaos_dest"))
        served: dict[str, int] = {}
        ports = stack.enter_context(
            runner._destinations(scenario, dest_url, served, rng.randrange(1 << 30))
        )
        config = Path(f"/tmp/effectusd-chaos-{os.getpid()}.toml")
        config.write_text(config_text(ports, scenario, urls))
        _submit(config, urls, scenario)
        daemons = runner.Daemons(scenario, config, None, rng)
        daemons.start()
        _drive(scenario, daemons, urls, started, rng)
        daemons.stop()
        runner.settle(config, None)
        report.kills, report.restarts = daemons.kills, daemons.restarts
        for url in urls.values():
            part = Report(scenario.name)
            part.restarts = report.restarts
            runner._check(part, scenario, url, dest_url)
            report.lost += part.lost
            report.duplicates = part.duplicates  # the destination's rows: every store's keys
            report.violations += part.violations
            for state, count in part.states.items():
                report.states[state] = report.states.get(state, 0) + count
    report.seconds = round(time.monotonic() - started, 1)
    return report

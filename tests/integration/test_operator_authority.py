"""Operator actions with a fencing authority (``[fencing] url``), on real PostgreSQL and a real
HTTP destination: a retry (from the command line or the console) gives back on the authority
the lease its dispatch's ended claim left there, so the dispatch sent again is sent at once,
not after a fence wait on its own dead claim; an authority that cannot be asked is said, and
the action stands."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from effectusd.cli import main
from effectusd.config import Config, load_config
from effectusd.console.service import ConsoleService
from effectusd.console.stores import Served
from effectusd.store.sql import store_backend
from tests.conftest import ADMIN_URL, drop_database
from tests.integration.test_fencing_across_stores import migrated_postgres
from tests.integration.test_fencing_authority_daemons import wait_for
from tests.support.authority import migrated_authority
from tests.support.destination import Request, Response, running
from tests.support.harness import attempts_of, client_for, daemon_running, fetch

pytestmark = pytest.mark.postgres
LEASE_MARGIN_S = 30  # a dead claim's lease on the authority lasts past this, plus 10 s


@pytest.fixture
def databases() -> Iterator[tuple[str, str]]:
    authority, store = migrated_authority(), migrated_postgres()
    yield authority, store
    drop_database(store)
    drop_database(authority)


class StaleOnce:
    """A destination that answers its first charge (once ``answer`` is set) with stale_fence,
    and acknowledges every later one."""

    def __init__(self) -> None:
        self.calls: list[float] = []  # time.monotonic() of each
        self.answer = threading.Event()

    def __call__(self, request: Request) -> Response:
        self.calls.append(time.monotonic())
        if len(self.calls) == 1:
            self.answer.wait(30)
            return Response(409, {"error": "stale"}, {"X-Effectus-Outcome": "stale_fence"})
        return Response(200, {"ok": True}, {"X-Effectus-Fencing": "acknowledged"})


def config_file(tmp: Path, base_url: str, authority: str, store: str) -> Path:
    path = tmp / "effectusd.toml"
    path.write_text(
        f'[dispatcher]\npoll_interval = "50ms"\nlease_margin = "{LEASE_MARGIN_S}s"\n'
        f'[fencing]\nurl = "{authority}"\n'
        f'[destinations.dest]\nbase_url = "{base_url}"\ntimeout = "2s"\n'
        '[verbs.charge]\ndestination = "dest"\npath = "/charge"\n'
        'fencing = ["account:{args.account}"]\ndelivery = "at_least_once"\n'
        f'[database.stores.a]\nurl = "{store}"\nnamespace = "ns-a"\n'
    )
    return path


def allow_connections(url: str, allowed: bool) -> None:
    """Let the database at ``url`` take connections, or refuse them and end those it has."""
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS {str(allowed).lower()}')
        if not allowed:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (name,),
            )


def cli_retry(path: Path, saga_id: str) -> str:
    result = CliRunner().invoke(
        main, ["--config", str(path), "retry", saga_id, "--evidence", "the account is free"]
    )
    assert result.exit_code == 0, result.output
    return result.output


def console_retry(config: Config, store: str, saga_id: str) -> str:
    served = Served(config, store_backend(store), "a", "store 'a'")
    service = ConsoleService(config, [served])
    label, report = asyncio.run(
        service.act("retry", saga_id, {"evidence": "the account is free"}, "user:ops")
    )
    assert label == "a"
    return report.summary()


@pytest.mark.parametrize("surface", ["cli", "console"])
async def test_a_retried_fenced_dispatch_is_sent_at_once_not_after_its_own_dead_lease(
    databases: tuple[str, str], tmp_path: Path, surface: str
) -> None:
    authority, store = databases
    destination = StaleOnce()
    with running(destination) as dest:
        path = config_file(tmp_path, dest.base_url, authority, store)
        config = load_config(path).model_copy(update={"namespace": "ns-a"})
        client = client_for(config, store)
        step = {"id": "s", "verb": "charge", "args": {"account": "shared"}, "compensate": "none"}
        saga = client.submit({"plan_id": "pay", "steps": [step]}, execution_id="o-1").saga_id
        async with daemon_running(config, store, store_label="a") as daemon:
            await wait_for(lambda: len(destination.calls) == 1)
            # the authority goes away while the call runs: the lease the claim took there
            # cannot be given back once its outcome (stale_fence) is recorded
            await asyncio.to_thread(allow_connections, authority, False)
            destination.answer.set()
            await wait_for(lambda: client.get(saga).state == "blocked_fence")

            async def unreachable() -> bool:
                _, detail = await daemon._ready()
                return str(detail["fencing_authority"]).startswith("unreachable")

            async with asyncio.timeout(30):
                while not await unreachable():
                    await asyncio.sleep(0.05)
            await asyncio.to_thread(allow_connections, authority, True)
            left = fetch(authority, "SELECT * FROM effectus_fencing_leases")
            assert [row["holder_saga_id"] for row in left] == [saga]

            retried_at = time.monotonic()
            if surface == "cli":
                said = await asyncio.to_thread(cli_retry, path, saga)
            else:
                said = await asyncio.to_thread(console_retry, config, store, saga)
            await wait_for(lambda: client.get(saga).state == "completed", timeout=20)
        await wait_for(lambda: not fetch(authority, "SELECT * FROM effectus_fencing_leases"))
    assert "warning" not in said
    assert len(destination.calls) == 2
    assert destination.calls[1] - retried_at < 10  # not after the dead lease ran out (30 s+)
    stale, sent = attempts_of(store, saga, "s")  # no fence wait between them
    assert stale["outcome"] == "stale_fence" and sent["fencing_status"] == "acknowledged"


def test_an_action_with_the_authority_unreachable_stands_and_says_so_without_its_url(
    databases: tuple[str, str], tmp_path: Path
) -> None:
    _, store = databases
    unreachable = "postgresql://postgres:pa55word@127.0.0.1:1/fencing?connect_timeout=2"
    path = config_file(tmp_path, "http://127.0.0.1:1", unreachable, store)
    config = load_config(path).model_copy(update={"namespace": "ns-a"})
    client = client_for(config, store)
    plan = {
        "plan_id": "pay",
        "steps": [{"id": "s", "verb": "charge", "args": {"account": "x"}, "compensate": "none"}],
    }
    saga = client.submit(plan, execution_id="order-1").saga_id

    result = CliRunner().invoke(main, ["--config", str(path), "cancel", saga])

    assert result.exit_code == 0, result.output
    assert client.get(saga).state == "compensated"  # never sent: canceled at once
    assert "warning: the fencing authority could not be asked (OperationalError" in (result.output)
    assert "pa55word" not in result.output and "127.0.0.1:1" not in result.output

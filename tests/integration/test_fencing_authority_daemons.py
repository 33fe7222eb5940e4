"""One fencing authority for several stores, through real daemons (one per store, and the
kit's watermarks): tokens for one account rise across both stores with none refused stale;
while the authority cannot be reached fenced work waits and unfenced work goes on; an authority
restored from an older backup grants above every token sent. Real PostgreSQL databases (two
stores and the authority); the provider's own tests are in test_fencing_authority.py."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from effectusd.cli import main
from effectusd.config import Config
from effectusd.core.canonical import parse_json
from effectusd.fencing.authority import open_authority
from tests.conftest import create_database, drop_database
from tests.integration.test_fencing_authority import handed_out, holder, relayed
from tests.support.authority import stores_fenced_by
from tests.support.destination import Request, Response, running
from tests.support.harness import (
    attempts_of,
    client_for,
    daemon_running,
    dispatch_of,
    fetch,
    make_config,
    run_until_idle,
)

pytestmark = pytest.mark.postgres


def store_config(
    base_url: str, authority: str, stores: dict[str, str], label: str | None = None
) -> Config:
    """Two verbs on one destination: `charge` fenced on a shared account and on its store's
    tenant, `note` unfenced; with ``label``, that store's namespace."""
    verbs = {
        "charge": {
            "fencing": ["account:{args.account}", "tenant:{store}"],
            "delivery": "at_least_once",
            "retry": {"max_attempts": 5, "initial_backoff": "20ms", "max_backoff": "200ms"},
        },
        "note": {"retry": {"initial_backoff": "20ms"}},
    }
    database = {
        "stores": {name: {"url": url, "namespace": f"ns-{name}"} for name, url in stores.items()}
    }
    config = make_config(base_url, verbs, fencing={"url": authority}, database=database)
    if label is not None:
        config = config.model_copy(update={"namespace": f"ns-{label}"})
    return config


def plan(verb: str, n: int) -> dict[str, object]:
    return {
        "plan_id": verb,
        "steps": [
            {"id": "s", "verb": verb, "args": {"account": "shared", "n": n}, "compensate": "none"}
        ],
    }


class Watermarks:
    """A destination that keeps a watermark per resource and refuses a token at or below it
    (stale_fence), and remembers every call."""

    def __init__(self) -> None:
        self.marks: dict[str, int] = {}
        self.refused: list[tuple[str, int]] = []
        self.seen: list[tuple[str, int]] = []
        self.calls: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, request: Request) -> Response:
        with self.lock:
            self.calls.append(request.path)
            if request.path != "/charge":
                return Response(200, {"ok": True})
            grants = parse_json(request.headers["x-effectus-fencing-grants"])
            stale = [
                (g["resource"], g["token"])
                for g in grants
                if g["token"] <= self.marks.get(g["resource"], 0)
            ]
            if stale:
                self.refused += stale
                return Response(409, {"error": "stale"}, {"X-Effectus-Outcome": "stale_fence"})
            for grant in grants:
                self.marks[grant["resource"]] = grant["token"]
                self.seen.append((grant["resource"], grant["token"]))
        return Response(200, {"ok": True}, {"X-Effectus-Fencing": "acknowledged"})


async def wait_for(predicate: Any, timeout: float = 60.0) -> None:
    async with asyncio.timeout(timeout):
        while not await asyncio.to_thread(predicate):
            await asyncio.sleep(0.05)


async def test_two_stores_fence_one_account_through_the_authority_with_no_stale_token(
    authority: str, stores: dict[str, str]
) -> None:
    destination = Watermarks()
    with running(destination) as dest:
        configs = {label: store_config(dest.base_url, authority, stores, label) for label in stores}
        sagas = {
            label: [
                client_for(configs[label], url).submit(plan("charge", n), execution_id=f"c-{n}")
                for n in range(6)
            ]
            for label, url in stores.items()
        }
        async with (
            daemon_running(configs["a"], stores["a"], store_label="a"),
            daemon_running(configs["b"], stores["b"], store_label="b"),
        ):

            def all_done() -> bool:
                return all(
                    client_for(configs[label], stores[label]).get(s.saga_id).state == "completed"
                    for label in stores
                    for s in sagas[label]
                )

            await wait_for(all_done)

    assert destination.refused == []
    shared = [token for resource, token in destination.seen if resource == "account:shared"]
    assert len(shared) == 12 and shared == sorted(shared) and len(set(shared)) == 12
    per_store = {resource for resource, _ in destination.seen} - {"account:shared"}
    assert per_store == {"tenant:a", "tenant:b"}
    for label, url in stores.items():
        for saga in sagas[label]:
            *waits, attempt = attempts_of(url, saga.saga_id, "s")
            assert attempt["fencing_status"] == "acknowledged"
            # a wait names the holder by its store (it may be the other store's dispatch), or
            # says that it released the resource between the grant and the look at its lease
            assert all(
                " in store '" in wait["error"] or "just released" in wait["error"] for wait in waits
            ), [wait["error"] for wait in waits]
            assert {g["resource"] for g in attempt["grants"]} == {
                "account:shared",
                f"tenant:{label}",
            }
        # the tokens came from the authority; the store's counters keep the highest it sent
        kept = fetch(url, "SELECT resource, last_token FROM effectus_fencing_counters")
        sent = [
            g for saga in sagas[label] for g in attempts_of(url, saga.saga_id, "s")[-1]["grants"]
        ]
        assert {row["resource"]: row["last_token"] for row in kept} == {
            resource: max(g["token"] for g in sent if g["resource"] == resource)
            for resource in {g["resource"] for g in sent}
        }
    # every lease was given back on the authority after its outcome was recorded
    assert fetch(authority, "SELECT * FROM effectus_fencing_leases") == []


async def test_while_the_authority_is_unreachable_fenced_work_waits_and_unfenced_goes_on(
    authority: str, stores: dict[str, str]
) -> None:
    destination = Watermarks()
    url = stores["a"]
    async with relayed(authority) as (proxy, through_proxy):
        with running(destination) as dest:
            config = store_config(dest.base_url, through_proxy, stores, "a")
            client = client_for(config, url)
            await proxy.stop()
            fenced = client.submit(plan("charge", 1), execution_id="fenced").saga_id
            unfenced = client.submit(plan("note", 1), execution_id="unfenced").saga_id
            async with daemon_running(config, url, store_label="a") as daemon:
                await wait_for(lambda: client.get(unfenced).state == "completed")
                await wait_for(lambda: len(attempts_of(url, fenced, "s")) >= 2)
                ready, detail = await daemon._ready()
                assert not ready
                assert str(detail["fencing_authority"]).startswith("unreachable for ")
                assert destination.calls == ["/note"]  # nothing fenced was sent
                waiting = dispatch_of(url, fenced, "s")
                assert waiting["fence_wait_since"] is None  # not counted toward wait_limit
                assert waiting["state"] in ("retry_wait", "in_flight")

                await proxy.start()
                await wait_for(lambda: client.get(fenced).state == "completed")
                ready, detail = await daemon._ready()
                assert detail["fencing_authority"] == "reachable"
    waits = attempts_of(url, fenced, "s")[:-1]
    assert waits and all(
        a["error"] == "the fencing authority cannot be reached; nothing was sent" for a in waits
    ), [a["error"] for a in waits]
    assert all(a["outcome"] == "retryable_failure_known_not_committed" for a in waits)
    assert attempts_of(url, fenced, "s")[-1]["fencing_status"] == "acknowledged"
    assert destination.calls.count("/charge") == 1 and destination.refused == []


async def test_an_authority_restored_from_an_older_backup_grants_above_every_token_sent(
    authority: str, stores: dict[str, str], tmp_path: Path
) -> None:
    backup = create_database("effectusd_authority", template=authority)  # before any grant
    try:
        ahead = 3 * 2**36  # the authority had run far ahead of its clock's floor
        with psycopg.connect(authority, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO effectus_fencing_counters (resource, last_token)"
                " VALUES ('account:shared', %s)",
                (ahead,),
            )
        destination = Watermarks()
        with running(destination) as dest:
            config = store_config(dest.base_url, authority, stores, "a")
            client = client_for(config, stores["a"])
            for n in range(3):
                client.submit(plan("charge", n), execution_id=f"c-{n}")
            await run_until_idle(config, stores["a"], store_label="a")
        sent = max(token for resource, token in destination.seen if resource == "account:shared")
        assert sent > ahead
        # the authority is lost; its backup is restored and `migrate` run, as after any restore
        path = stores_fenced_by(tmp_path / "effectusd.toml", backup, stores)
        result = CliRunner().invoke(main, ["--config", str(path), "migrate"])
        assert result.exit_code == 0, result.output
        provider = open_authority(backup, "b", "daemon-b")
        try:
            who = holder(1)
            granted = await provider.grant([(who, ["account:shared"])])
            [(_, token)] = handed_out(granted.acquire(who, ["account:shared"]))
        finally:
            await provider.close()
        assert token > sent  # carried from store a's counter, which kept what it sent
    finally:
        drop_database(backup)

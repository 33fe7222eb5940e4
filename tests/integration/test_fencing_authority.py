"""One fencing authority for several stores ([fencing] url; docs/design.md section 8, "One
authority for several stores"): tokens for a resource rise across every store and start above
what each store issued; a holder in one store keeps a resource from the others; `{store}` makes
a resource per store; while the authority cannot be reached fenced dispatches wait (nothing
fenced is sent, the wait is not counted, /readyz says so) and unfenced work goes on. Real
PostgreSQL databases (two stores and the authority), real daemons, one per store."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from effectusd.backends.operation import Operation
from effectusd.cli import main
from effectusd.fencing.authority import AuthorityFencing, open_authority
from effectusd.fencing.protocol import AuthorityUnreachable, FenceBusy, FenceHolder, Grants
from tests.conftest import create_database, drop_database
from tests.support.authority import stores_fenced_by
from tests.support.harness import (
    fetch,
)

pytestmark = pytest.mark.postgres


def counters_of(url: str) -> Any:
    async def read() -> list[tuple[str, int]]:
        rows = await asyncio.to_thread(
            fetch, url, "SELECT resource, last_token FROM effectus_fencing_counters"
        )
        return [(row["resource"], row["last_token"]) for row in rows]

    return read


def holder(n: int) -> FenceHolder:
    return FenceHolder(n, str(uuid.uuid4()), datetime.now(UTC) + timedelta(minutes=1), f"saga-{n}")


async def give_back(provider: AuthorityFencing, *holders: FenceHolder) -> None:
    """Release on the authority and wait for it (the daemon does not: it runs in the
    background, after the record committed)."""
    await provider.released([(who.dispatch_id, who.lease_token) for who in holders])
    await asyncio.gather(*provider.releasing)


def handed_out(operation: Operation[Grants]) -> Grants:
    """What a granted provider's acquire hands out in the store's write-ahead: the tokens
    taken on the authority, each kept in the store's counter (its only statements)."""
    kept = []
    try:
        statement = next(operation)
        while True:
            kept.append(statement)
            statement = operation.send([])
    except StopIteration as done:
        grants: Grants = done.value
    assert kept == [
        ("keep_fence_token", {"resource": resource, "token": token}) for resource, token in grants
    ]
    return grants


async def test_tokens_rise_across_stores_and_start_above_every_token_a_store_issued(
    authority: str, stores: dict[str, str]
) -> None:
    issued = 5 * 2**36 + 12345  # a store that had run far ahead (or on a later timeline)
    with psycopg.connect(stores["b"], autocommit=True) as conn:
        conn.execute(
            "INSERT INTO effectus_fencing_counters (resource, last_token) VALUES ('account:1', %s)",
            (issued,),
        )
    providers = {
        label: open_authority(authority, label, f"owner-{label}", counters_of(url))
        for label, url in stores.items()
    }
    tokens = []
    try:
        for n in range(1, 9):
            provider = providers["a" if n % 2 else "b"]
            who = holder(n)
            granted = await provider.grant([(who, ["account:1"])])
            [(resource, token)] = handed_out(granted.acquire(who, ["account:1"]))
            assert resource == "account:1"
            tokens.append(token)
            await give_back(provider, who)
    finally:
        for provider in providers.values():
            await provider.close()

    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)
    # store a granted first, before store b's daemon carried b's counters in (a store added
    # without `migrate`): from b's first grant on, every grant is above what b issued
    assert all(token > issued for token in tokens[1:])
    [row] = fetch(
        authority, "SELECT last_token FROM effectus_fencing_counters WHERE resource = 'account:1'"
    )
    assert row["last_token"] == tokens[-1]


async def test_migrate_carries_every_store_counters_so_the_first_grant_is_above_them(
    authority: str, stores: dict[str, str], tmp_path: Path
) -> None:
    issued = 7 * 2**36
    with psycopg.connect(stores["b"], autocommit=True) as conn:
        conn.execute(
            "INSERT INTO effectus_fencing_counters (resource, last_token)"
            " VALUES ('account:1', %s), ('tenant:{store}', %s)",
            (issued, issued + 1),
        )
    path = stores_fenced_by(tmp_path / "effectusd.toml", authority, stores)

    result = CliRunner().invoke(main, ["--config", str(path), "migrate"])

    assert result.exit_code == 0, result.output
    assert "authority:\n  schema is up to date\n  counters carried from: store 'a', store 'b'" in (
        result.output
    )
    carried = {
        row["resource"]: row["last_token"]
        for row in fetch(authority, "SELECT * FROM effectus_fencing_counters")
    }
    assert carried == {"account:1": issued, "tenant:b": issued + 1}
    provider = open_authority(authority, "a", "owner-a")
    try:
        who = holder(1)
        granted = await provider.grant([(who, ["account:1"])])
        [(_, token)] = handed_out(granted.acquire(who, ["account:1"]))
    finally:
        await provider.close()
    assert token > issued


def test_migrate_check_names_a_pending_or_unreachable_authority_never_its_url(
    stores: dict[str, str], tmp_path: Path
) -> None:
    empty = create_database("effectusd_authority")
    unreachable = "postgresql://postgres:pa55word@127.0.0.1:1/fencing?connect_timeout=2"
    try:
        for authority, code, said in (
            (empty, 6, "authority:\n  applied: none\n  pending: 1_fencing_authority, "),
            (unreachable, 1, "authority:\n  error: cannot connect to the fencing authority: "),
        ):
            path = stores_fenced_by(tmp_path / "effectusd.toml", authority, stores)
            result = CliRunner().invoke(main, ["--config", str(path), "migrate", "--check"])

            assert result.exit_code == code, result.output
            assert said in result.output
            assert "failed in the fencing authority" in result.output
            assert "store a:\n  applied: 10001" in result.output  # the stores are checked too
            assert "pa55word" not in result.output and "effectusd_authority" not in result.output
    finally:
        drop_database(empty)


async def test_a_holder_in_one_store_keeps_the_resource_from_the_others_but_not_its_own_store(
    authority: str, stores: dict[str, str]
) -> None:
    a = open_authority(authority, "a", "daemon-a")
    b = open_authority(authority, "b", "daemon-b")
    try:
        first, second, third = holder(1), holder(2), holder(3)
        granted = await a.grant([(first, ["account:7", "tenant:{store}"])])
        grants = handed_out(granted.acquire(first, ["account:7", "tenant:{store}"]))
        assert [resource for resource, _ in grants] == ["account:7", "tenant:a"]

        busy = await b.grant([(second, ["account:7"]), (third, ["tenant:{store}"])])
        with pytest.raises(FenceBusy) as caught:
            handed_out(busy.acquire(second, ["account:7"]))
        assert caught.value.holder == "dispatch 1 of saga saga-1 in store 'a', lease owner daemon-a"
        [(resource, _)] = handed_out(busy.acquire(third, ["tenant:{store}"]))
        assert resource == "tenant:b"  # per store: a's tenant:a does not hold it

        await give_back(a, first)
        again = await b.grant([(second, ["account:7"])])
        [(_, token)] = handed_out(again.acquire(second, ["account:7"]))
        assert token > dict(grants)["account:7"]
        leases = fetch(authority, "SELECT * FROM effectus_fencing_leases ORDER BY resource")
        assert [(lease["resource"], lease["holder_store"]) for lease in leases] == [
            ("account:7", "b"),
            ("tenant:b", "b"),
        ]
        # the lease runs on the authority's clock: the dispatch lease plus the skew margin
        expires = leases[0]["expires_at"] - leases[0]["acquired_at"]
        assert timedelta(seconds=60) < expires <= timedelta(seconds=71)
    finally:
        await a.close()
        await b.close()


async def test_a_grant_the_authority_refuses_fails_that_claim_alone(authority: str) -> None:
    with psycopg.connect(authority, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO effectus_fencing_counters (resource, last_token)"
            " VALUES ('account:full', 9007199254740991)"  # 2^53 - 1: no token is left
        )
    provider = open_authority(authority, "a", "daemon-a")
    try:
        fine, refused = holder(1), holder(2)
        granted = await provider.grant([(fine, ["account:1"]), (refused, ["account:full"])])

        [(resource, _)] = handed_out(granted.acquire(fine, ["account:1"]))
        assert resource == "account:1"
        with pytest.raises(psycopg.Error) as caught:  # the store's write-ahead fails for it
            handed_out(granted.acquire(refused, ["account:full"]))
        assert not isinstance(caught.value, FenceBusy)
        assert await provider.readiness() == (True, "reachable")  # the authority answered
    finally:
        await provider.close()


async def test_an_unreachable_authority_hands_out_waits_and_readiness_says_so() -> None:
    provider = open_authority("postgresql://postgres@127.0.0.1:1/nowhere", "a", "daemon-a")
    try:
        assert await provider.readiness() == (True, "reachable")
        who = holder(1)
        granted = await provider.grant([(who, ["account:1"])])
        with pytest.raises(AuthorityUnreachable):
            handed_out(granted.acquire(who, ["account:1"]))
        ready, why = await provider.readiness()
        assert not ready
        assert why.startswith("unreachable for ") and "fenced dispatches wait" in why
        await give_back(provider, who)  # logged, never raised
    finally:
        await provider.close()


class Proxy:
    """A TCP relay to the test PostgreSQL: stopping it makes the authority unreachable (its
    open connections are cut), starting it again on the same port brings it back."""

    def __init__(self) -> None:
        self.port = 0
        self.server: asyncio.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in list(self.writers):
            writer.close()
        await self.server.wait_closed()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", 5432)
        self.writers |= {writer, up_writer}

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                sink.close()

        try:
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        except asyncio.CancelledError:  # the loop closing under a connection still open
            writer.close()
            up_writer.close()


async def test_readiness_sees_the_authority_back_with_no_fenced_work_to_grant(
    authority: str,
) -> None:
    async with relayed(authority) as (proxy, through_proxy):
        provider = open_authority(through_proxy, "a", "daemon-a")
        try:
            who = holder(1)
            handed_out((await provider.grant([(who, ["account:1"])])).acquire(who, ["account:1"]))
            await proxy.stop()  # the pool's open connection is cut too
            gone = await provider.grant([(who, ["account:1"])])
            with pytest.raises(AuthorityUnreachable):
                handed_out(gone.acquire(who, ["account:1"]))
            assert (await provider.readiness())[0] is False
            await proxy.start()
            async with asyncio.timeout(30):  # the pool reconnects with its own backoff
                while (await provider.readiness()) != (True, "reachable"):
                    await asyncio.sleep(0.1)
        finally:
            await provider.close()


@asynccontextmanager
async def relayed(url: str) -> AsyncIterator[tuple[Proxy, str]]:
    proxy = Proxy()
    await proxy.start()
    try:
        yield proxy, url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
    finally:
        if proxy.server is not None and proxy.server.is_serving():
            await proxy.stop()

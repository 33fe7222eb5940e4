"""Fencing tokens above what an earlier store or an older backup granted (docs/design.md
section 8, "Across stores and backups"): every grant is at least the database clock's floor,
so a new store, or a copy of a store restored after the original granted more, grants above
them once its clock has passed their last token; nothing is detected and nobody moves a
counter. Real stores: a SQLite file, a PostgreSQL database and its copy (CREATE DATABASE …
TEMPLATE, as a restored backup), and the destination kit keeping watermarks."""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from effectusd.backends.operation import Operation
from effectusd.config import Config
from effectusd.core.views import SagaView
from effectusd.fencing.protocol import FenceHolder
from effectusd.fencing.store import StoreFencing
from tests.conftest import create_database, drop_database, migrated_sqlite
from tests.support import backends
from tests.support.harness import attempts_of, client_for, make_config, run_until_idle
from tests.support.services import serving
from tests.support.tokens import TOKEN_SPAN, database_clock, ticks, wait_for_clock_past

ROOT = Path(__file__).resolve().parents[2]
postgres = pytest.mark.postgres


def grant(url: str, resource: str = "account:a", holder: int = 1) -> int:
    """One token for ``resource``, its lease given back in the same transaction."""
    who = FenceHolder(
        holder, f"00000000-0000-0000-0000-{holder:012d}", datetime.now(UTC) + timedelta(minutes=1)
    )

    def taken() -> Operation[int]:
        [(_, token)] = yield from StoreFencing().acquire(who, [resource])
        yield from StoreFencing().release([(who.dispatch_id, who.lease_token)])
        return token

    with backends.connection(url) as conn:
        return backends.run(conn, taken())


def grants(url: str, n: int) -> list[int]:
    return [grant(url, holder=holder) for holder in range(1, n + 1)]


def migrated_postgres() -> str:
    url = create_database("effectusd_tokens")
    with psycopg.connect(url, autocommit=True) as conn:
        backends.migrate(conn)
    return url


def copied(url: str, tmp_path: Path) -> str:
    """A copy of the store as it is now, as a backup restored later would be."""
    if not backends.is_sqlite(url):
        return create_database("effectusd_tokens", template=url)
    copy = tmp_path / "restored.db"
    with sqlite3.connect(backends.sqlite_path(url)) as source, sqlite3.connect(copy) as target:
        source.backup(target)
    return f"sqlite:///{copy}"


def set_counter(url: str, token: int) -> None:
    mark = "?" if backends.is_sqlite(url) else "%s"
    with backends.connection(url) as conn:
        conn.execute(
            f"UPDATE effectus_fencing_counters SET last_token = {mark}"
            f" WHERE resource = 'account:a'",
            (token,),
        )
        conn.commit()


# -- the floor -----------------------------------------------------------------------------


def test_a_first_grant_is_one_above_the_database_clocks_floor_on_timeline_one(
    store_url: str,
) -> None:
    before = database_clock(store_url)
    token = grant(store_url)
    after = database_clock(store_url)
    # one tick of slack each way: SQLite's clock is a floating-point Julian day
    assert ticks(before) <= token <= ticks(after) + 2
    assert token < TOKEN_SPAN  # timeline 1: the timeline's bits are clear


def pg_value(db: str, expression: str, *params: object) -> int:
    with psycopg.connect(db) as conn:
        row = conn.execute(f"SELECT {expression}", params).fetchone()
    assert row is not None
    return int(row[0])


@postgres
def test_the_floor_is_the_timelines_base_plus_the_ticks_since_2026(db: str) -> None:
    def floor(timeline: int, at: str) -> int:
        return pg_value(db, "effectus_fence_floor(%s::bigint, %s::timestamptz)", timeline, at)

    assert floor(1, "2026-01-01 00:00:01.509+00") == 150  # whole 10 ms ticks
    assert floor(3, "2026-01-01 00:00:01.509+00") == 2 * TOKEN_SPAN + 150
    assert floor(2, "2025-12-31 23:00:00+00") == TOKEN_SPAN  # no ticks before the epoch
    assert floor(1, "2047-10-11 15:26:07.36+00") == TOKEN_SPAN  # the ticks fill 36 bits
    with pytest.raises(psycopg.errors.RaiseException, match="that fencing tokens can carry"):
        floor(131073, "2026-06-01 00:00:00+00")


@postgres
def test_the_next_token_after_the_last_on_a_timeline_at_a_time(db: str) -> None:
    def after(last: int, timeline: int, at: str) -> int:
        query = "effectus_fence_next(%s::bigint, %s::bigint, %s::timestamptz)"
        return pg_value(db, query, last, timeline, at)

    noon = 155 * 24 * 360000 + 12 * 360000  # 2026-06-05 12:00 UTC in ticks
    assert after(0, 1, "2026-06-05 12:00:00+00") == noon + 1  # a new resource: the clock
    assert after(0, 3, "2026-06-05 12:00:00+00") == 2 * TOKEN_SPAN + noon + 1
    # the clock set back an hour after the last grant: one above the last
    assert after(noon + 360000, 1, "2026-06-05 12:00:00+00") == noon + 360001
    # a last token of timeline 3 (a dump of that server), granted a minute ago: timeline 3 on
    assert after(2 * TOKEN_SPAN + noon - 6000, 1, "2026-06-05 12:00:00+00") == (
        2 * TOKEN_SPAN + noon + 1
    )


# -- across stores and backups -------------------------------------------------------------


@postgres
def test_a_new_postgresql_store_grants_above_every_token_a_sqlite_store_granted(
    db: str, tmp_path: Path
) -> None:
    before = grants(migrated_sqlite(tmp_path), 5)
    assert before == sorted(before) and len(set(before)) == 5
    wait_for_clock_past(db, before[-1])
    assert grant(db) > before[-1]  # db: emptied, its counters as a new store's


@pytest.mark.parametrize("kind", [pytest.param("postgres", marks=postgres), "sqlite"])
def test_an_older_copy_restored_grants_above_what_the_original_granted_after_it(
    kind: str, tmp_path: Path
) -> None:
    original = migrated_postgres() if kind == "postgres" else migrated_sqlite(tmp_path)
    copy = None
    try:
        grants(original, 2)
        copy = copied(original, tmp_path)  # the backup
        since = grants(original, 3)  # granted after it, and lost with the original
        wait_for_clock_past(copy, since[-1])
        assert grant(copy) > since[-1]  # the backup restored: its first token
    finally:
        for url in (copy, original):
            if url is not None and not backends.is_sqlite(url):
                drop_database(url)


def test_a_dump_of_a_server_on_a_higher_timeline_goes_on_above_the_grants_it_missed(
    store_url: str,
) -> None:
    """A resource's tokens keep the highest timeline they reached: a counter a server on
    timeline 3 left in a dump, restored into a store on timeline 1 (a new cluster, a file)."""
    grant(store_url)
    dumped = 2 * TOKEN_SPAN + ticks(database_clock(store_url))
    set_counter(store_url, dumped)
    missed = dumped + 3  # the old server's grants after the dump, lost with it
    wait_for_clock_past(store_url, missed - 2 * TOKEN_SPAN)
    assert missed < grant(store_url) < 3 * TOKEN_SPAN


# -- a clock set back ----------------------------------------------------------------------


def test_a_clock_set_back_still_gives_tokens_one_above_the_last(store_url: str) -> None:
    grant(store_url)
    # as grants made while the clock read an hour later leave the counter
    ahead = ticks(database_clock(store_url) + timedelta(hours=1))
    set_counter(store_url, ahead)
    assert [grant(store_url) for _ in range(3)] == [ahead + 1, ahead + 2, ahead + 3]


def test_a_new_store_whose_clock_is_behind_the_last_grant_loses_that_much(
    tmp_path: Path,
) -> None:
    """The documented limit: the floor is the clock, so a new store whose clock reads an hour
    before the old store's last grant grants below it (by at most that hour)."""
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    old, new = migrated_sqlite(tmp_path / "old"), migrated_sqlite(tmp_path / "new")
    grant(old)
    hour = timedelta(hours=1) // timedelta(milliseconds=10)
    last = ticks(database_clock(old)) + hour
    set_counter(old, last)
    first = grant(new)
    assert last - hour <= first < last


# -- a destination that keeps watermarks ---------------------------------------------------


@contextmanager
def kit_shop(shop: Path) -> Iterator[Config]:
    """contrib/kit_shop_service.py on its own SQLite file (it keeps a watermark per resource
    and refuses a lower token as stale), and a config whose ``charge`` fences the account."""
    command = [sys.executable, str(ROOT / "contrib" / "kit_shop_service.py"), "--port", "0"]
    with serving([*command, "--database-url", f"sqlite:///{shop}"], cwd=shop.parent) as base:
        verb = {"path": "/payments/charge", "fencing": ["account:{args.account_id}"]}
        yield make_config(base, {"charge": verb})


async def charged(config: Config, url: str, orders: Sequence[str]) -> list[SagaView]:
    """A fenced charge on account acc-1 per order, run by a daemon on ``url`` until idle."""
    client = client_for(config, url)
    args: dict[str, Any] = {"account_id": "acc-1", "amount": 100, "currency": "EUR"}
    sagas = [
        client.submit(
            {
                "plan_id": "pay",
                "steps": [
                    {
                        "id": "charge",
                        "verb": "charge",
                        "args": {**args, "order": order},
                        "compensate": "none",
                    }
                ],
            },
            execution_id=order,
        ).saga_id
        for order in orders
    ]
    await run_until_idle(config, url)
    for saga in sagas:  # each sent once (another's fence may have kept it waiting first)
        sent = [a for a in attempts_of(url, saga, "charge") if a["sent_at"] is not None]
        assert [a["fencing_status"] for a in sent] == ["acknowledged"]
    return [view for view in map(client.get, sagas) if view is not None]


def watermark(shop: Path) -> int:
    with sqlite3.connect(shop) as conn:
        [(token,)] = conn.execute(
            "SELECT token FROM effectus_dest_watermarks WHERE resource = 'account:acc-1'"
        ).fetchall()
    return int(token)


@postgres
async def test_a_watermarking_service_takes_every_fenced_call_after_a_move_to_postgresql(
    db: str, tmp_path: Path
) -> None:
    with kit_shop(tmp_path / "shop.db") as config:
        on_sqlite = await charged(config, migrated_sqlite(tmp_path), ["s-1", "s-2"])
        mark = watermark(tmp_path / "shop.db")
        wait_for_clock_past(db, mark)
        on_postgres = await charged(config, db, ["p-1", "p-2"])
    assert [v.state for v in on_sqlite + on_postgres] == ["completed"] * 4
    assert watermark(tmp_path / "shop.db") > mark


@postgres
async def test_a_watermarking_service_takes_every_fenced_call_after_a_backup_is_restored(
    tmp_path: Path,
) -> None:
    original = migrated_postgres()
    copy = None
    try:
        with kit_shop(tmp_path / "shop.db") as config:
            before = await charged(config, original, ["o-1"])
            copy = copied(original, tmp_path)  # the backup
            lost = await charged(config, original, ["o-2", "o-3"])  # then the original is lost
            mark = watermark(tmp_path / "shop.db")
            wait_for_clock_past(copy, mark)
            restored = await charged(config, copy, ["r-1", "r-2"])
    finally:
        for url in (copy, original):
            if url is not None:
                drop_database(url)
    assert [v.state for v in before + lost + restored] == ["completed"] * 5
    assert watermark(tmp_path / "shop.db") > mark


def test_a_resource_ahead_of_the_clock_shows_its_lead_in_ticks(store_url: str) -> None:
    grant(store_url, "account:b")
    grant(store_url, "account:a")
    ahead = 2 * TOKEN_SPAN + ticks(database_clock(store_url)) + 500  # on timeline 3's base
    set_counter(store_url, ahead)
    before = database_clock(store_url)
    with backends.connection(store_url) as conn:
        leads = dict(conn.execute("SELECT resource, ticks_ahead FROM effectus_fencing_leads"))
    after = database_clock(store_url)
    # one tick of slack each way: SQLite's clock is a floating-point Julian day
    lead = ahead - 2 * TOKEN_SPAN
    assert lead - ticks(after) - 1 <= leads["account:a"] <= lead - ticks(before) + 1
    assert leads["account:b"] <= 1  # granted once, at the clock

"""Fencing tokens as docs/design.md section 8 lays them out, written out for tests to check
the stores' SQL against: on timeline T a grant is max(last token, (T - 1) * 2^36 + ticks) + 1,
ticks being the 10 ms since 2026-01-01 00:00 UTC by the database's clock. Here the clock is
read from the database and the floor computed from it, so a test can wait, with a bound, for
a store's clock to pass a token another store granted."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from tests.support import backends

TOKEN_SPAN = 2**36  # the tokens of one timeline: timeline T's floor is (T - 1) * TOKEN_SPAN
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
TICK = timedelta(milliseconds=10)
UNIX_JULIAN_DAY = 2440587.5  # the Julian day of 1970-01-01 00:00 UTC (SQLite's julianday)


def ticks(at: datetime) -> int:
    """The clock's part of a floor at ``at`` (0 before the epoch)."""
    return max(0, (at - EPOCH) // TICK)


def database_clock(url: str) -> datetime:
    """The store's database clock now (PostgreSQL's clock_timestamp(), SQLite's 'now')."""
    with backends.connection(url) as conn:
        if backends.is_sqlite(url):
            [(day,)] = conn.execute("SELECT julianday('now')").fetchall()
            return datetime.fromtimestamp((day - UNIX_JULIAN_DAY) * 86400.0, UTC)
        [(now,)] = conn.execute("SELECT clock_timestamp()").fetchall()
        assert isinstance(now, datetime)
        return now


def wait_for_clock_past(url: str, token: int, bound: float = 20.0) -> None:
    """Wait until a grant on timeline 1 of ``url`` would be above ``token``: its database
    clock's floor (with a tick of slack for SQLite's floating-point days) is at least it."""
    deadline = time.monotonic() + bound
    while ticks(database_clock(url)) < token + 1:
        assert time.monotonic() < deadline, f"the clock of {url} did not pass {token}"
        time.sleep(TICK.total_seconds() / 2)  # a poll of the clock, not a wait for an event

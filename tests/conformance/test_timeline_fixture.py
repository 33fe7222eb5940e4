"""A database written by an earlier release reads the same timelines: the rows of
``tests/fixtures/timelines/`` (a sequential success, a fan-out, a compensation, a block an
operator resolved, one a probe settled; see ``timeline_fixture.py``), loaded into a fresh
migrated store, give the timelines that release read from them, event ids included."""

from __future__ import annotations

from tests.conformance.support import StoreUnderTest
from tests.conformance.timeline_fixture import fixture, load, timelines


async def test_a_database_an_earlier_release_wrote_reads_the_same_timelines(
    store: StoreUnderTest,
) -> None:
    rows, expected = fixture(store.kind)
    load(store, rows)
    assert len(expected) == 5
    assert timelines(store, list(expected)) == expected

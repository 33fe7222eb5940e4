"""The drain's RSS from its first minute on: what `bench` reports of a long drain."""

from __future__ import annotations

from effectusd.bench import _minute
from effectusd.bench.measures import RSS_SAMPLE_S

MINUTE = round(60 / RSS_SAMPLE_S)  # samples before the one taken a minute in


def test_the_minutes_reading_starts_at_the_sample_taken_a_minute_in() -> None:
    samples = [70.0] * MINUTE + [80.0, 79.0, 83.5, 81.0]
    assert _minute(samples, lambda later: later[0]) == 80.0
    assert _minute(samples, lambda later: max(later) - later[0]) == 3.5


def test_a_drain_shorter_than_a_minute_has_no_minute_reading() -> None:
    assert _minute([70.0] * MINUTE, lambda later: later[0]) is None
    assert _minute([], lambda later: later[0]) is None

"""The drain's RSS from its first minute on: what `bench` reports of a long drain."""

from __future__ import annotations

from effectusd.bench import after_a_minute
from effectusd.bench.measures import RSS_SAMPLE_S

MINUTE = round(60 / RSS_SAMPLE_S)  # samples before the one taken a minute in


def test_the_minutes_reading_starts_at_the_sample_taken_a_minute_in() -> None:
    samples = [70.0] * MINUTE + [80.0, 79.0, 83.5, 81.0]
    assert after_a_minute(samples) == (80.0, 3.5)


def test_a_drain_shorter_than_a_minute_has_no_minute_reading() -> None:
    assert after_a_minute([70.0] * MINUTE) == (None, None)
    assert after_a_minute([]) == (None, None)

"""The console's sign-in limits: token buckets that lift by themselves."""

from __future__ import annotations

from effectusd.console.limits import Buckets


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_spent_bucket_says_how_long_to_wait_and_fills_again_as_time_passes() -> None:
    clock = Clock()
    buckets = Buckets(burst=3, every=6.0, clock=clock)
    assert [buckets.spend("peer") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.spend("peer") == 6.0 and buckets.wait("peer") == 6.0
    clock.now += 4.5
    assert buckets.wait("peer") == 1.5
    clock.now += 1.5
    assert buckets.spend("peer") == 0.0  # not locked out: one came back
    clock.now += 3_600
    assert [buckets.spend("peer") for _ in range(4)] == [0.0, 0.0, 0.0, 6.0]  # never over burst


def test_one_keys_spending_leaves_anothers_bucket_full() -> None:
    buckets = Buckets(burst=1, every=6.0, clock=Clock())
    assert buckets.spend("dashboard") == 0.0
    assert buckets.spend("dashboard") > 0
    assert buckets.spend("oncall") == 0.0


def test_past_max_keys_the_least_recently_touched_bucket_is_forgotten() -> None:
    buckets = Buckets(burst=1, every=6.0, max_keys=2, clock=Clock())
    buckets.spend("a")
    buckets.spend("b")
    buckets.wait("a")  # touched: now b is the oldest
    buckets.spend("c")
    assert buckets.wait("a") > 0  # kept, still spent
    assert buckets.wait("b") == 0.0  # forgotten: a full bucket again

"""The daemon's heap once it is up: what start-up made is frozen, young collections spaced."""

from __future__ import annotations

import gc

# The collector's full passes walk every tracked object, and most of a daemon's heap is what
# it imported and set up at start: frozen once the daemon is up, those are never walked again.
# Young collections every 10,000 net allocations instead of 700 take the rest: together they
# took the collector from a fifth of the daemon's CPU to about 1% in the bench, and RSS stays
# flat over the soak (docs/performance.md).
GC_YOUNG_THRESHOLD = 10_000


def settle_heap() -> None:
    """Freeze what start-up made and space young collections out (GC_YOUNG_THRESHOLD)."""
    gc.collect()
    gc.freeze()
    young, older, oldest = gc.get_threshold()
    gc.set_threshold(max(GC_YOUNG_THRESHOLD, young), older, oldest)

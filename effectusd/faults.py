"""Fault injection for the chaos suite: inert unless EFFECTUSD_FAULT names a point.

``EFFECTUSD_FAULT=after_write_ahead`` makes the daemon SIGKILL itself the first time it
reaches that point (``EFFECTUSD_FAULT_AFTER=N`` skips the first N passes).
"""

from __future__ import annotations

import os
import signal

POINTS = frozenset(
    {
        # rows leased; written ahead only where the claim did it (unfenced, PostgreSQL)
        "after_claim",
        "after_write_ahead",  # sent_at and grants durable, request not yet sent
        "after_send",  # the request left (body written), no answer yet
        "after_call",  # the answer arrived, nothing recorded
        "before_record",  # about to open the outcome transaction
        "during_record",  # outcome written, transaction not committed
        "after_record",  # outcome committed
    }
)
_target = os.environ.get("EFFECTUSD_FAULT") or None
_skip = int(os.environ.get("EFFECTUSD_FAULT_AFTER", "0"))
if _target is not None and _target not in POINTS:
    raise RuntimeError(f"EFFECTUSD_FAULT={_target!r} is not one of {sorted(POINTS)}")


def point(name: str) -> None:
    """Die here, abruptly, if this is the configured fault point."""
    global _skip
    if _target != name:
        return
    if _skip > 0:
        _skip -= 1
        return
    os.kill(os.getpid(), signal.SIGKILL)

"""Figures the bench reports that need no database: percentiles and the process's memory."""

from __future__ import annotations

import resource


def percentile(values: list[float], pct: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def daemon_rss_mb() -> float:
    """Current resident set of this process (VmRSS), else its peak (ru_maxrss, in KiB)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

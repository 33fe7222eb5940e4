"""Figures the bench reports that need no database: percentiles, the process's memory and
the CPU a PostgreSQL server on this machine spent."""

from __future__ import annotations

import os
import resource
import threading


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


class RssSampler:
    """The process's RSS every ``interval`` seconds from a thread, while the block runs (the
    first sample taken on entry, the last on exit): is memory flat over a long drain?"""

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> RssSampler:
        self.samples.append(daemon_rss_mb())
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append(daemon_rss_mb())

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self.samples.append(daemon_rss_mb())


def server_cpu_seconds() -> float | None:
    """CPU seconds spent so far by the PostgreSQL server processes this machine can see
    (backends, background workers and, through the postmaster's children's times, backends
    that have exited), or None when there are none: the database is elsewhere. Like WAL, it
    is the whole server's: other work on it counts too."""
    ticks, found = 0, False
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="ascii", errors="replace") as stat:
                line = stat.read()
        except OSError:
            continue  # gone meanwhile, or not ours to read
        name_end = line.rfind(")")
        if not line[line.find("(") + 1 : name_end].startswith("postgres"):
            continue
        fields = line[name_end + 2 :].split()
        # utime, stime, cutime, cstime: fields 14-17 of proc(5), 11-14 after the name
        ticks += sum(int(value) for value in fields[11:15])
        found = True
    return ticks / os.sysconf("SC_CLK_TCK") if found else None

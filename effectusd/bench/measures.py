"""Figures the bench reports that need no database: percentiles, a drain's totals per step, the
process's memory and the CPU some databases' PostgreSQL backends on this machine spent."""

from __future__ import annotations

import os
import resource
import threading
from dataclasses import dataclass


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


RSS_SAMPLE_S = 0.5


class RssSampler:
    """The process's RSS every ``interval`` seconds from a thread, while the block runs (the
    first sample taken on entry, the last on exit): is memory flat over a long drain?"""

    def __init__(self, interval: float = RSS_SAMPLE_S) -> None:
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


def stat_cpu_seconds(line: str, ticks: int) -> float:
    """The user and system CPU seconds of a /proc/PID/stat line: fields 14 and 15 of proc(5),
    11 and 12 after the process's name (which may hold spaces and parentheses)."""
    fields = line[line.rfind(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / ticks


def process_cpu_seconds(pid: int) -> float | None:
    """The CPU seconds another process on this machine has spent, None when it cannot be read
    (no /proc, gone, not ours to read)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat_cpu_seconds(stat.read(), os.sysconf("SC_CLK_TCK"))
    except OSError:
        return None


NOT_OURS = -1


class DatabaseCpu:
    """CPU seconds spent by the PostgreSQL backends serving some databases, while the block
    runs: the server processes on this machine whose title names one of them ("postgres:
    USER DATABASE HOST …"; one sampler for all, so N stores cost the measured process one
    scan, not N), sampled from a thread, so a backend that exits meanwhile (a
    daemon's pool closing) counts up to its last sample, when it was idle. The server's
    background processes (WAL writer, checkpointer) are left out: they serve every database,
    and a checkpoint would land in whichever run it happens to fall in. ``seconds`` is None
    when no such backend was seen (the server is on another machine).

    The thread runs in the measured process, so it reads each process's title once it is
    final: a process is known by its pid and the inode of its /proc entry (a new process that
    reuses the pid gets a new one), and later samples read only the counters of the backends
    that matched. A backend forked a moment ago still shows the postmaster's command line
    until it sets its title: that one is read again. Reading every title every sample took
    ~4% of the daemon's CPU in a drain."""

    def __init__(self, *databases: str, interval: float = 0.05) -> None:
        self.titles = [f" {database} ".encode() for database in databases]
        self.interval = interval
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.database_of: dict[int, int] = {}  # a backend's pid: the index of its database
        # (pid, inode): the index of the database whose backend it is, NOT_OURS for none
        self._titles: dict[tuple[int, int], int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> DatabaseCpu:
        self._sample(self.first)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample(self.last)

    @property
    def seconds(self) -> float | None:
        if not self.last:
            return None
        return sum(cpu - self.first.get(pid, 0.0) for pid, cpu in self.last.items())

    def backends(self) -> list[int] | None:
        """How many backends served each database (in the order given) over the block: the
        connections its clients held; None when the server is on another machine."""
        if not self.last:
            return None
        return [
            sum(1 for pid in self.last if self.database_of.get(pid) == index)
            for index in range(len(self.titles))
        ]

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample(self.last)

    def _sample(self, into: dict[int, float]) -> None:
        ticks = os.sysconf("SC_CLK_TCK")
        seen: dict[tuple[int, int], int] = {}
        for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
            if not entry.name.isdigit():
                continue
            key = (int(entry.name), entry.inode())
            ours = self._titles.get(key)
            try:
                if ours is None:
                    with open(f"/proc/{entry.name}/cmdline", "rb") as title:
                        text = title.read().replace(b"\0", b" ") + b" "
                    ours = next((i for i, t in enumerate(self.titles) if t in text), NOT_OURS)
                    known = text.startswith(b"postgres: ") or b"postgres" not in text
                    if ours != NOT_OURS or known:
                        seen[key] = ours  # a title a backend keeps for its life: known
                else:
                    seen[key] = ours
                if ours == NOT_OURS:
                    continue
                with open(f"/proc/{entry.name}/stat", encoding="ascii", errors="replace") as stat:
                    line = stat.read()
            except OSError:
                continue  # gone meanwhile, or not ours to read
            into[key[0]] = stat_cpu_seconds(line, ticks)
            self.database_of[key[0]] = ours
        self._titles = seen  # processes gone are forgotten


@dataclass(frozen=True)
class DrainTotals:
    """What one drain took, over every store it served (the database's readings summed over
    their databases; the WAL is the server's), and the bench's figures per step and per
    second made from them."""

    steps: int
    seconds: float
    cpu_s: float  # the daemon processes'
    db_cpu_s: float | None  # the stores' backends' (None: the server is elsewhere)
    wal_bytes: int
    commits: int
    rows_written: int
    sink_cpu_s: float | None = None  # the bench's no-op sink's (None: not measured)

    def steps_per_s(self) -> float:
        return round(self.steps / self.seconds, 1)

    def cpu_us_per_step(self) -> float:
        return round(self.cpu_s / self.steps * 1e6, 1)

    def db_cpu_us_per_step(self) -> float | None:
        return per_unit_us(self.db_cpu_s, self.steps)

    def sink_cpu_us_per_step(self) -> float | None:
        return per_unit_us(self.sink_cpu_s, self.steps)

    def wal_bytes_per_step(self) -> float:
        return round(self.wal_bytes / self.steps, 1)

    def commits_per_step(self) -> float:
        return round(self.commits / self.steps, 2)

    def rows_written_per_step(self) -> float:
        return round(self.rows_written / self.steps, 2)

    def commits_per_s(self) -> float:
        return round(self.commits / self.seconds, 1)

    def wal_bytes_per_s(self) -> int:
        return round(self.wal_bytes / self.seconds)


@dataclass
class PeerResult:
    """A peer's drain; a unit is what it counts: a pgqueuer job, a DBOS workflow's step."""

    units: int
    concurrency: int
    seconds: float
    units_per_s: float
    cpu_us_per_unit: float  # CPU of the peer's process (all its threads), per unit
    db_cpu_us_per_unit: float | None  # its database's backends', when on this machine
    wal_bytes_per_unit: float  # whole-cluster WAL, as effectusd bench reads its own
    rows_written_per_unit: float  # row versions written in its database (pg_stat_database)
    # CPU of the no-op sink's process, per unit: what answering the peer's requests cost
    # (None: not measured)
    sink_cpu_us_per_unit: float | None = None

    @classmethod
    def of(
        cls,
        units: int,
        concurrency: int,
        seconds: float,
        cpu_s: float,
        db_cpu_s: float | None,
        wal_bytes: int,
        rows_written: int,
        sink_cpu_s: float | None = None,
    ) -> PeerResult:
        """A drain's totals, per unit."""
        return cls(
            units,
            concurrency,
            round(seconds, 3),
            round(units / seconds, 1),
            round(cpu_s / units * 1e6, 1),
            per_unit_us(db_cpu_s, units),
            round(wal_bytes / units, 1),
            round(rows_written / units, 2),
            per_unit_us(sink_cpu_s, units),
        )


def per_unit_us(seconds: float | None, units: int) -> float | None:
    """CPU seconds over ``units``, in µs per unit (None stays None)."""
    return None if seconds is None else round(seconds / units * 1e6, 1)

"""`make bench-instructions`: the daemon's instructions per step, a figure the machine's speed
does not move.

On a shared VM the same code's steps/s, and its CPU µs per step too, moved by about a
factor of two within an hour (docs/performance-log.md, round six): a change worth 5% cannot be
seen in them. This runs the in-process drain of ``effectusd bench`` under valgrind's
callgrind twice, over N and over 2N sagas of K steps, counting only the drain (the counters
are zeroed once the sagas are submitted and dumped when the daemon is idle; the no-op sink
runs in its own, uncounted, process). The difference of the two counts, over the N·K steps it
adds, leaves out what one drain costs whatever its size (the daemon's start, its pool, its
stop): that is the figure to compare between two revisions. PostgreSQL's work is not in it.

Needs valgrind (``apt-get install valgrind``) and a PostgreSQL server; takes a few minutes
(valgrind runs Python about fifty times slower).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from effectusd.backends.postgres import connect
from effectusd.backends.postgres.migrations import migrate as migrate_set
from effectusd.bench import _bench_config, _drain, _submit_all
from effectusd.bench.database import drop_database, scratch_database
from effectusd.bench.fleet import bench_stores
from effectusd.bench.harness import start_sink
from effectusd.store.sql import POSTGRES_MIGRATIONS

DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"


@dataclass
class InstructionCount:
    sagas: int
    steps_per_saga: int
    instructions_small: int  # the drain of ``sagas`` sagas
    instructions_large: int  # the drain of twice as many
    instructions_per_step: int  # the difference, over the steps it adds


def per_step(small: int, large: int, added_steps: int) -> int:
    """Instructions per step, from the drains of N and of 2N sagas (``added_steps`` = N·K)."""
    if added_steps <= 0:
        raise ValueError("the larger drain must add steps")
    if large <= small:
        raise ValueError("the larger drain counted no more instructions than the smaller one")
    return round((large - small) / added_steps)


def callgrind_totals(text: str) -> int:
    """The ``totals:`` (else ``summary:``) line of a callgrind output file: instructions read."""
    found: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("totals", "summary") and value.strip():
            found[key] = int(value.split()[0])
    if "totals" in found:
        return found["totals"]
    if "summary" in found:
        return found["summary"]
    raise ValueError("no totals or summary line in the callgrind output")


def count(
    server_url: str, sagas: int, steps: int, progress: Callable[[str], None] = print
) -> InstructionCount:
    """Both drains under callgrind, one after the other, each in a scratch database."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise RuntimeError("bench-instructions needs valgrind (apt-get install valgrind)")
    small = _counted_drain(server_url, sagas, steps, progress)
    large = _counted_drain(server_url, 2 * sagas, steps, progress)
    return InstructionCount(sagas, steps, small, large, per_step(small, large, sagas * steps))


def _counted_drain(server_url: str, sagas: int, steps: int, progress: Callable[[str], None]) -> int:
    progress(f"drain of {sagas} saga(s) of {steps} step(s) under callgrind…")
    with tempfile.TemporaryDirectory(prefix="effectusd-callgrind-") as scratch:
        out = Path(scratch) / "callgrind.out"
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}",
                sys.executable,
                "-m",
                "effectusd.bench.instructions",
                "--drain",
                "--database-url",
                server_url,
                "--sagas",
                str(sagas),
                "--steps",
                str(steps),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        dumps = sorted(Path(scratch).glob("callgrind.out.*"))  # the dump taken at idle
        if not dumps:
            raise RuntimeError("callgrind wrote no dump of the drain")
        return callgrind_totals(dumps[0].read_text(encoding="utf-8", errors="replace"))


def _drain_here(server_url: str, sagas: int, steps: int) -> None:
    """Run under callgrind: submit, zero the counters, drain until idle, dump them."""
    with start_sink() as sink:
        config = _bench_config(sink.url, 32, None)
        url = scratch_database(server_url)
        try:
            with connect(url) as conn:
                migrate_set(conn, POSTGRES_MIGRATIONS)
            _submit_all(config, url, sagas, steps)
            _callgrind("-z")
            asyncio.run(_drain(config, bench_stores([url], config.namespace)))
            _callgrind("-d")
        finally:
            drop_database(server_url, url)


def _callgrind(option: str) -> None:
    subprocess.run(["callgrind_control", option, str(os.getpid())], check=True, capture_output=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m effectusd.bench.instructions",
        description="The daemon's instructions per step under callgrind (drains of N and 2N "
        "sagas; their difference over the steps it adds).",
    )
    parser.add_argument("--database-url", default=DEFAULT_SERVER)
    parser.add_argument("--sagas", type=int, default=200, help="N (default 200)")
    parser.add_argument("--steps", type=int, default=5, help="steps per saga (default 5)")
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    parser.add_argument("--drain", action="store_true", help=argparse.SUPPRESS)  # the child
    args = parser.parse_args(argv)
    if args.sagas < 1 or args.steps < 1:
        parser.error("--sagas and --steps must be at least 1")
    if args.drain:
        _drain_here(args.database_url, args.sagas, args.steps)
        return 0
    try:
        result = count(args.database_url, args.sagas, args.steps, progress=_stderr)
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        print(f"bench-instructions: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(asdict(result)))
    else:
        print(
            f"{result.instructions_per_step:,} instructions per step "
            f"({result.sagas} and {2 * result.sagas} sagas of {result.steps_per_saga} steps: "
            f"{result.instructions_small:,} and {result.instructions_large:,})"
        )
    return 0


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())

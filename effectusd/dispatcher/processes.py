"""`effectusd run --processes N`: several dispatcher processes on one host, under one parent.

Each child is a plain `effectusd run` with the same config and databases (every store it
serves) and its own owner id.
Claims are already safe across daemons (SKIP LOCKED, leases, guarded completions), so the
children do not coordinate. The parent starts them, forwards SIGTERM and SIGINT, and waits:

- Children run in their own process group, so a terminal's Ctrl-C, or a signal sent to the
  parent's group, reaches each child exactly once: through the parent. (A daemon takes a
  second signal as "exit now, leave the leases to expire".)
- On Linux a child is sent SIGTERM if the parent dies, so no dispatcher is left orphaned.
- When a child fails, the others are asked to drain (SIGTERM) and the parent exits with the
  failed child's code. A child that exits 0 (`--until-idle`) just ends.
- A child killed by a signal the parent sent it died before its daemon installed its handler,
  i.e. before it claimed anything: that counts as a clean stop.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType

log = logging.getLogger("effectusd.processes")

FORWARDED = (signal.SIGTERM, signal.SIGINT)


def child_command(global_args: Sequence[str], run_args: Sequence[str]) -> list[str]:
    """The command line of one child: this interpreter running `effectusd ... run ...`."""
    return [sys.executable, "-m", "effectusd.cli", *global_args, "run", *run_args]


def exit_code(returncode: int) -> int:
    """A shell-style exit code: 128 + N for a child killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def _parent_death_hook() -> Callable[[], None] | None:
    """Linux: a preexec function asking for SIGTERM when the parent dies (PR_SET_PDEATHSIG).
    Everything it needs is resolved here, in the parent, before any fork."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    pr_set_pdeathsig = 1

    def hook() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGTERM))
        if os.getppid() != parent:  # the parent died before the request took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return hook


@dataclass
class Supervisor:
    """Start ``commands`` as child processes, forward stop signals, wait for all of them.

    The parent stays single-threaded: on Linux a child is sent its parent-death signal each
    time the thread that is its parent exits, so helper threads would turn one into several
    (and a daemon's second signal means "exit now")."""

    commands: Sequence[Sequence[str]]
    env: Mapping[str, str] | None = None
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    sent: set[int] = field(default_factory=set)  # the signals sent to the children so far

    def run(self) -> int:
        """0 when every child exited 0 (or was stopped by a signal we sent before its daemon
        had started), else the exit code of the first child that failed."""
        previous = {sig: signal.signal(sig, self._forward) for sig in FORWARDED}
        try:
            self._start()
            return self._wait()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _start(self) -> None:
        env = {**os.environ, **(self.env or {})}
        hook = _parent_death_hook()
        total = len(self.commands)
        for index, command in enumerate(self.commands):
            if self.sent:  # asked to stop while starting: start no more
                break
            process = subprocess.Popen(list(command), env=env, process_group=0, preexec_fn=hook)
            self.processes.append(process)
            log.info("dispatcher process %d/%d started (pid %d)", index + 1, total, process.pid)

    def _wait(self) -> int:
        code = 0
        live = dict(enumerate(self.processes))
        while live:
            _until_one_exits(list(live.values()))
            for index, process in list(live.items()):
                returncode = process.poll()
                if returncode is None:
                    continue
                del live[index]
                if returncode == 0 or -returncode in self.sent:
                    log.info("dispatcher process %d (pid %d) exited", index + 1, process.pid)
                    continue
                log.error(
                    "dispatcher process %d (pid %d) failed with exit code %d",
                    index + 1,
                    process.pid,
                    exit_code(returncode),
                )
                if code == 0:
                    code = exit_code(returncode)
                    self.signal_all(signal.SIGTERM, "a dispatcher process failed")
        return code

    def _forward(self, signum: int, _frame: FrameType | None) -> None:
        self.signal_all(signal.Signals(signum), "received")

    def signal_all(self, sig: signal.Signals, why: str) -> None:
        self.sent.add(sig)
        live = [process for process in self.processes if process.poll() is None]
        if live:
            log.info("%s: %s; sending it to %d dispatcher process(es)", sig.name, why, len(live))
        for process in live:
            process.send_signal(sig)


def _until_one_exits(processes: Sequence[subprocess.Popen[bytes]]) -> None:
    """Block until one of ``processes`` has exited, without reaping it; signal handlers run
    meanwhile. Linux: poll their pidfds. Elsewhere: wake up every 200 ms."""
    fds: list[int] = []
    try:
        poller = select.poll()
        for process in processes:
            fds.append(os.pidfd_open(process.pid))
            poller.register(fds[-1], select.POLLIN)
    except (AttributeError, OSError):  # no pidfds here; or a child already reaped: look now
        for fd in fds:
            os.close(fd)
        with contextlib.suppress(subprocess.TimeoutExpired):
            processes[0].wait(timeout=0.2)
        return
    try:
        poller.poll()  # interrupted by a signal: its handler runs, then the wait goes on
    finally:
        for fd in fds:
            os.close(fd)


def supervise(commands: Sequence[Sequence[str]], env: Mapping[str, str] | None = None) -> int:
    return Supervisor(commands, env).run()

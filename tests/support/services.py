"""Services as real processes (uvicorn apps started from the command line), for tests that
drive them over HTTP."""

from __future__ import annotations

import contextlib
import re
import subprocess
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest


@contextlib.contextmanager
def serving(
    command: Sequence[str], *, cwd: Path, env: dict[str, str] | None = None
) -> Iterator[str]:
    """Run ``command`` (a uvicorn app asked for ``--port 0``) in ``cwd``; yield its base URL
    once uvicorn reports it listening (its startup line is the readiness signal)."""
    process = subprocess.Popen(
        list(command),
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    watchdog = threading.Timer(60, process.kill)  # a hung start fails the test, not the run
    watchdog.start()
    try:
        assert process.stderr is not None
        seen = []
        for line in process.stderr:
            seen.append(line)
            match = re.search(r"Uvicorn running on (http://\S+)", line)
            if match:
                break
        else:
            pytest.fail(f"{command} exited before listening:\n{''.join(seen)}")
        drain = threading.Thread(target=process.stderr.read, daemon=True)
        drain.start()  # keep reading, or a full pipe would stall the server's logging
        yield match.group(1)
    finally:
        watchdog.cancel()
        process.terminate()
        process.wait(timeout=30)

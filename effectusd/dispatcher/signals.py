"""How a daemon is asked to stop: SIGTERM and SIGINT drain, a second one soon after is the same
request delivered twice, a later second one exits at once (leases left to expire). One daemon
or one fleet of stores installs it, once per process."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time

log = logging.getLogger("effectusd.daemon")

REPEATED_SIGNAL_S = 1.0  # a second SIGTERM sooner than this is the first one, delivered twice


def install_stop_signals(stopping: asyncio.Event) -> None:
    """Set ``stopping`` on the first SIGTERM or SIGINT; exit 143 on a second one later."""
    loop = asyncio.get_running_loop()
    first: list[float] = []

    def on_term() -> None:
        if first:
            if time.monotonic() - first[0] < REPEATED_SIGNAL_S:
                # One stop request delivered twice (systemd signals the whole control
                # group, and `run --processes` forwards the same signal): keep draining.
                log.info("SIGTERM again at once: the same stop request; still draining")
                return
            log.warning("second SIGTERM: exiting now; leases are left to expire")
            os._exit(143)
        first.append(time.monotonic())
        log.info("SIGTERM: no new claims; draining")
        stopping.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, on_term)
        except (NotImplementedError, RuntimeError):  # not the main thread (tests)
            return

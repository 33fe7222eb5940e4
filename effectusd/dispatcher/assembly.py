"""What a daemon is assembled from, by its configuration: an executor per destination, the
fencing provider, its slots, and the owner id its leases carry."""

from __future__ import annotations

import os
import socket
import ssl
import uuid

from effectusd.config import Config, ConfigError
from effectusd.core.registry import Registry
from effectusd.dispatcher.capacity import Capacity, wait_limits
from effectusd.executors.factory import executor_for
from effectusd.executors.protocol import Executor
from effectusd.fencing.authority import open_authority
from effectusd.fencing.memory import MemoryFencing
from effectusd.fencing.protocol import FencingProvider
from effectusd.fencing.store import StoreFencing


def fencing_provider(config: Config, label: str | None = None, owner: str = "") -> FencingProvider:
    """The provider of a daemon serving the store ``label``: the fencing authority's when the
    configuration names one, else the store's own tokens (or, in tests, the in-memory ones)."""
    if config.fencing.provider == "memory":
        if not config.fencing.test_setup:
            raise ConfigError(
                'fencing.provider = "memory" is local_advisory: its tokens die with the process '
                "and protect nothing across daemons. It is for tests only; set "
                "fencing.test_setup = true to use it there, or use the store provider."
            )
        return MemoryFencing()
    if config.fencing.url is not None:
        return open_authority(config.fencing.url, label, owner)
    return StoreFencing()


def configured_capacity(config: Config, registry: Registry) -> Capacity:
    """The slots of ``config``: each destination's ``max_concurrency``, the overall
    ``dispatcher.concurrency``, and how many claims may wait for a destination's slot."""
    settings = config.dispatcher
    limits = {name: d.max_concurrency for name, d in config.destinations.items()}
    longest_call_s = {name: registry.longest_timeout(name).total_seconds() for name in limits}
    return Capacity(
        limits=limits,
        total_limit=settings.concurrency,
        wait_limits=wait_limits(limits, longest_call_s, settings.lease_margin.total_seconds()),
    )


def new_owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def destination_executors(config: Config) -> dict[str, Executor]:
    """An executor per configured destination. Making one reads its CA file, if any: one that
    cannot be read, or holds no certificate, is a ConfigError naming the key."""
    executors: dict[str, Executor] = {}
    for name, destination in config.destinations.items():
        try:
            executors[name] = executor_for(name, destination)
        except ssl.SSLError as exc:
            raise ConfigError(
                f"destinations.{name}.ca_file: holds no certificate that can be read "
                f"({exc.reason or 'PEM expected'})"
            ) from None
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise ConfigError(f"destinations.{name}.ca_file: cannot be read ({reason})") from None
    return executors

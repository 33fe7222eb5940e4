"""The live verb registry: contracts by name, plus each destination's default timeout."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from effectusd.core.contracts import VerbContract

DEFAULT_TIMEOUT = timedelta(seconds=10)
# How long a dispatch waits for a fencing resource held by another dispatch before it blocks;
# the config's default is longer than a dead holder's lease (client.registry_from_config).
DEFAULT_FENCE_WAIT_LIMIT = timedelta(minutes=5)


@dataclass(frozen=True)
class Registry:
    verbs: Mapping[str, VerbContract]
    destination_timeouts: Mapping[str, timedelta] = field(default_factory=dict)
    fence_wait_limit: timedelta = DEFAULT_FENCE_WAIT_LIMIT

    def timeout_for(self, contract: VerbContract) -> timedelta:
        if contract.timeout is not None:
            return contract.timeout
        return self.destination_timeouts.get(contract.destination, DEFAULT_TIMEOUT)

"""The live verb registry: contracts by name, plus each destination's default timeout.

A dispatch takes its call timeout and retry budget from here at each attempt (not from what
was current when it was enqueued): they are operational tuning, outside the contract hash.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from effectusd.core.contracts import VerbContract
from effectusd.core.durations import to_milliseconds

DEFAULT_TIMEOUT = timedelta(seconds=10)
# How long a dispatch waits for a fencing resource held by another dispatch before it blocks;
# the config's default is longer than a dead holder's lease (Config.registry).
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

    def longest_timeout(self, destination: str) -> timedelta:
        """The longest call timeout of any verb of ``destination`` (its own default if none
        says otherwise): no call of it runs longer."""
        return max(
            (self.timeout_for(c) for c in self.verbs.values() if c.destination == destination),
            default=self.destination_timeouts.get(destination, DEFAULT_TIMEOUT),
        )

    def live_limits(self) -> dict[str, tuple[int, int]]:
        """verb -> (call timeout in ms, retry.max_attempts), as the claim applies them."""
        return {
            name: (to_milliseconds(self.timeout_for(contract)), contract.retry.max_attempts)
            for name, contract in sorted(self.verbs.items())
        }

    def live_pins(self) -> dict[str, tuple[str, str]]:
        """verb -> the contract hashes a dispatch may be pinned to (``contracts.pinned``),
        as the claim checks them where it writes a row ahead."""
        return {
            name: (contract.contract_hash, contract.legacy_contract_hash)
            for name, contract in sorted(self.verbs.items())
        }


def retry_budget(max_attempts: int, budget_base: int | None, live: VerbContract | None) -> int:
    """How many attempts a dispatch may make in all: the attempts made before its budget was
    granted (``budget_base``) plus the live verb's max_attempts. A row written before budgets
    were live (no base), or a verb no longer configured, keeps the row's own ``max_attempts``."""
    if budget_base is None or live is None:
        return max_attempts
    return budget_base + live.retry.max_attempts

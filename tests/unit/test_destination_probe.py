"""The probe's decisions as a table: what the lock check and the ledger row say, and the
answer (its statements run on both databases in tests/integration/test_destination_time.py)."""

from __future__ import annotations

from typing import Any

import pytest

from effectusd.backends.operation import drive
from effectusd.core.canonical import canonical_bytes, parse_json
from effectusd.destination.exchange import Query
from effectusd.destination.probe import probe_steps

KEY = "ab" * 32
STORED = ("completed", 200, canonical_bytes({"charge_id": "ch-1"}), None, True)
REFUSAL = ("completed", 402, canonical_bytes({"error": "declined"}), "permanent_failure", False)


def probed(held: bool, row: tuple[Any, ...] | None) -> tuple[int, Any, list[str]]:
    asked: list[str] = []

    def perform(step: Query) -> Any:
        asked.append(step.name)
        assert step.params == {"key": KEY}
        return (held,) if step.name == "probe_key_held" else row

    reply = drive(probe_steps(KEY), perform)
    return reply.status, parse_json(reply.body)["state"], asked


@pytest.mark.parametrize(
    ("held", "row", "status", "state"),
    [
        (False, None, 404, "unknown"),
        (True, None, 409, "in_progress"),
        (False, STORED, 200, "committed"),
        (True, STORED, 200, "committed"),  # a replay holds the key; the answer is stored
        # a stored refusal took no effect and never will (every retry replays it): never 2xx
        (False, REFUSAL, 422, "refused"),
        (False, ("in_progress", None, None, None, False), 409, "in_progress"),
    ],
)
def test_probe_states_from_the_lock_and_the_ledger_row(
    held: bool, row: tuple[Any, ...] | None, status: int, state: str
) -> None:
    # The lock is checked before the row is read, so a commit before the probe is seen.
    assert probed(held, row) == (status, state, ["probe_key_held", "probe_key"])


def test_a_malformed_key_runs_no_statement() -> None:
    asked: list[str] = []
    reply = drive(probe_steps("../etc"), lambda step: asked.append(step.name))
    assert (reply.status, asked) == (400, [])

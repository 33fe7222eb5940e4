"""What a destination's answer means when it does not say so itself: the per-destination
``answers`` preset (docs/design.md section 5, docs/configuration.md section 1).

``declared`` (the default) takes only what the destination declares (``X-Effectus-Outcome``)
or the configuration maps (``status_map``); every other non-2xx answer is unknown. ``http``
also takes the status codes whose meaning RFC 9110 fixes, where that meaning is safe to act
on: the request was refused and nothing was committed. 409 and 410 are not among them (with an
idempotency key, 409 may mean the same key is still being processed, and 410 a key that may
have run and was pruned), nor is any 5xx (a gateway may answer after the service committed).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Literal

from effectusd.core.states import OutcomeClass, State

Preset = Literal["declared", "http"]
DECLARED: Preset = "declared"
HTTP: Preset = "http"


class PresetClass(State):
    """Which row of the ``http`` preset's table classified an answer."""

    REFUSED = "refused"  # the request itself was refused: not committed, permanently
    RETRYABLE = "retryable"  # not committed, try again later
    # not committed, and the destination's or our configuration's problem (a credential, a
    # route): retried under the long budget, never compensated; spent, blocked_destination
    DESTINATION = "destination_problem"


HTTP_ANSWERS: Mapping[int, PresetClass] = MappingProxyType(
    {
        400: PresetClass.REFUSED,
        402: PresetClass.REFUSED,
        422: PresetClass.REFUSED,
        408: PresetClass.RETRYABLE,
        425: PresetClass.RETRYABLE,
        429: PresetClass.RETRYABLE,
        401: PresetClass.DESTINATION,
        403: PresetClass.DESTINATION,
        404: PresetClass.DESTINATION,
        405: PresetClass.DESTINATION,
        413: PresetClass.DESTINATION,
        415: PresetClass.DESTINATION,
    }
)

OUTCOME_OF: Mapping[PresetClass, OutcomeClass] = MappingProxyType(
    {
        PresetClass.REFUSED: OutcomeClass.PERMANENT,
        PresetClass.RETRYABLE: OutcomeClass.RETRYABLE,
        PresetClass.DESTINATION: OutcomeClass.RETRYABLE,
    }
)


DESTINATION_PROBLEM = "its or our configuration's problem; not committed"


def preset_class(preset: Preset, status: int) -> PresetClass | None:
    """The class ``preset`` gives ``status``; None when it leaves the answer unknown."""
    return HTTP_ANSWERS.get(status) if preset == HTTP else None


def describe(status: int, found: PresetClass) -> str:
    """The error an answer classified by the preset gets (the destination's reason follows)."""
    if found is PresetClass.DESTINATION:
        return f"HTTP {status} ({DESTINATION_PROBLEM})"
    return f"HTTP {status}"

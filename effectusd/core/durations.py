"""Human durations ("500ms", "30s", "1m", "2h", "30d") as used in config and on the CLI.

A duration always carries its unit. A bare number (``2000``, or the text ``"2000"``) is
refused wherever a duration is expected, never read as seconds: the error shows both
readings to choose from, so a file written before units were required says how to mend it.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import Annotated

from pydantic import BeforeValidator

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
UNIT_NAMES = ", ".join(_UNITS)
_PATTERN = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*")
MAX_SECONDS = 100 * 365 * 86400.0  # a century: anything longer is a typo, not a timeout


def needs_unit(number: str) -> str:
    """Why ``number`` (a duration written without its unit) is refused, and the fix."""
    return f'a duration needs a unit: write "{number}s" or "{number}ms" ({UNIT_NAMES})'


def parse_duration(value: str | timedelta) -> timedelta:
    """A duration from text with its unit ("30s"), or a ``timedelta`` as it is.

    ValueError for anything else, naming the input: a bare number (int, float or a string of
    digits) is refused with the fix (``needs_unit``), as is malformed or out-of-range text."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool) and _plain(value):
        raise ValueError(needs_unit(str(value)))
    match = _PATTERN.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"not a duration: {value!r} (expected a number with a unit: {UNIT_NAMES})")
    number, unit = match.groups()
    if unit is None:
        raise ValueError(needs_unit(number))
    seconds = float(number) * _UNITS[unit]
    if seconds > MAX_SECONDS:
        raise ValueError(f"duration {value!r} is out of range (0 to 100 years)")
    return timedelta(seconds=seconds)


def _plain(number: float) -> bool:
    """A number that would be a duration with a unit after it (not negative, finite)."""
    return math.isfinite(number) and number >= 0


# A duration field of a pydantic model: text with its unit or a timedelta, nothing else.
Duration = Annotated[timedelta, BeforeValidator(parse_duration)]


def to_milliseconds(value: timedelta) -> int:
    """Whole milliseconds, the form durations take inside hashes and rows."""
    return round(value.total_seconds() * 1000)


def format_duration(value: timedelta) -> str:
    """``value`` as the config writes it, in the largest unit up to hours that holds it whole
    ("24h", "90s", "400ms"): what parse_duration reads back."""
    ms = to_milliseconds(value)
    for unit in ("h", "m", "s"):
        size = round(_UNITS[unit] * 1000)
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"

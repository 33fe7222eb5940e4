"""Human durations ("500ms", "30s", "1m", "2h", "30d") as used in config and on the CLI."""

from __future__ import annotations

import math
import re
from datetime import timedelta

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PATTERN = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*")
MAX_SECONDS = 100 * 365 * 86400.0  # a century: anything longer is a typo, not a timeout


def parse_duration(text: str | int | float | timedelta) -> timedelta:
    """Parse a duration; a bare number means seconds. Raises ValueError naming the input."""
    if isinstance(text, timedelta):
        return text
    if isinstance(text, bool):
        raise ValueError(f"not a duration: {text!r}")
    if isinstance(text, int | float):
        return _seconds(float(text), text)
    match = _PATTERN.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(
            f"not a duration: {text!r} (expected a number with a unit: ms, s, m, h or d)"
        )
    return _seconds(float(match.group(1)) * _UNITS[match.group(2) or "s"], text)


def _seconds(seconds: float, source: object) -> timedelta:
    if math.isnan(seconds) or seconds < 0 or seconds > MAX_SECONDS:
        raise ValueError(f"duration {source!r} is out of range (0 to 100 years)")
    return timedelta(seconds=seconds)


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

"""Canonical JSON (RFC 8785 / JCS) with the limits of DESIGN.md section 3, reported by path.

We validate before handing a value to ``rfc8785`` so that every problem is reported at once
and names where it is (``steps[1].args.amount: integer outside ±(2^53-1)``), instead of the
first exception the serializer happens to raise.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from typing import Any

import rfc8785

JsonValue = Any
"""A value made of dict (str keys), list, str, int, float, bool and None."""

MAX_SAFE_INTEGER = 2**53 - 1
# JCS writes integral doubles below 1e21 as plain digits; past 2^53-1 those digits would read
# back as an integer we refuse, so such doubles are refused up front (no silent round-trip loss).
_PLAIN_DIGITS_LIMIT = 1e21


class CanonicalJSONError(ValueError):
    """A value that cannot be canonical JSON. ``problems`` holds every ``path: reason``."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


def join_path(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if key.isidentifier():
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key, ensure_ascii=True)}]"


def json_problems(value: object, path: str = "$") -> list[str]:
    """Every reason ``value`` is not canonical JSON, each prefixed with where it is."""
    problems: list[str] = []
    _walk(value, path, problems)
    return problems


def _walk(value: object, path: str, problems: list[str]) -> None:
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            problems.append(f"{path}: integer outside ±(2^53-1)")
        return
    if isinstance(value, float):
        if math.isnan(value):
            problems.append(f"{path}: NaN is not JSON")
        elif math.isinf(value):
            problems.append(f"{path}: Infinity is not JSON")
        elif value.is_integer() and MAX_SAFE_INTEGER < abs(value) < _PLAIN_DIGITS_LIMIT:
            problems.append(f"{path}: number outside ±(2^53-1) written as an integer")
        return
    if isinstance(value, str):
        if not _is_valid_unicode(value):
            problems.append(f"{path}: string contains a lone surrogate")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                problems.append(f"{path}: object key {key!r} is not a string")
                continue
            if not _is_valid_unicode(key):
                problems.append(f"{path}: object key contains a lone surrogate")
                continue
            _walk(item, join_path(path, key), problems)
        return
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _walk(item, join_path(path, index), problems)
        return
    problems.append(f"{path}: {type(value).__name__} is not a JSON type")


def _is_valid_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def canonical_bytes(value: object, path: str = "$") -> bytes:
    """The RFC 8785 bytes of ``value``; raises CanonicalJSONError listing every problem."""
    problems = json_problems(value, path)
    if problems:
        raise CanonicalJSONError(problems)
    return rfc8785.dumps(value)  # type: ignore[arg-type]


def canonical_text(value: object, path: str = "$") -> str:
    return canonical_bytes(value, path).decode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical_hash(value: object, path: str = "$") -> str:
    """Hex SHA-256 of the canonical bytes."""
    return sha256_hex(canonical_bytes(value, path))


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate object key {key!r}")
        result[key] = value
    return result


def parse_json(text: str | bytes) -> JsonValue:
    """Strict JSON parsing: no NaN/Infinity, no duplicate keys. Raises ValueError with position."""
    try:
        return json.loads(
            text, parse_constant=_reject_constant, object_pairs_hook=_no_duplicate_keys
        )
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"malformed JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from exc

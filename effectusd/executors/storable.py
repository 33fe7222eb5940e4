"""What a destination's answer may put in the store, and the bounded forms of what it may not.

Everything an executor returns is written to PostgreSQL (jsonb, text) or SQLite and hashed as
RFC 8785 JSON. A destination controls the answer, so one hostile or buggy answer must not be
able to produce a value that the recorder cannot write: that would fail the whole batch it is
recorded in, and every saga in it. Values are never quoted back: only why, and how large.
"""

from __future__ import annotations

import hashlib
from typing import Any

from effectusd.core.canonical import json_problems

MAX_REASONS = 3


def unstorable_reasons(value: Any) -> list[str]:
    """Why ``value`` cannot be stored as JSON, without saying where or what (both may be the
    destination's data): at most ``MAX_REASONS`` distinct reasons, empty when it can."""
    try:
        problems = json_problems(value)  # U+0000 included: PostgreSQL refuses it
    except RecursionError:
        return ["nested too deeply"]
    # Each problem is "path: reason"; the path may quote object keys, so only the reason stays.
    return sorted({problem.rpartition(": ")[2] for problem in problems})[:MAX_REASONS]


def body_digest(body: bytes) -> dict[str, Any]:
    """Enough to recognise a body an operator is shown elsewhere, without keeping it."""
    return {"bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()}

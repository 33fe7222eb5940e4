"""What a test needs from the machine: missing locally it skips; in CI
(EFFECTUSD_REQUIRE_POSTGRES=1, which .ci/run sets) it fails, so nothing is quietly not tested."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("EFFECTUSD_REQUIRE_POSTGRES") == "1"


def missing(message: str) -> NoReturn:
    if in_ci():
        pytest.fail(f"required in CI: {message}")
    pytest.skip(message)

"""The effectusd command line (docs/configuration.md section 3); each command group in its own
module."""

from effectusd.cli import (  # noqa: F401  (registers them)
    console,
    daemon,
    migrate,
    operator,
    plans,
    prune,
    sagas,
)
from effectusd.cli.app import main

__all__ = ["main"]

"""The operator console and admin API (docs/operations.md section 8): JSON under /api and
server-rendered pages, on the daemon's observability port or alone (`effectusd console`).

It reads with the store's own operations and acts with effectusd.operator, each action the
one guarded transaction the CLI runs; it never imports the dispatcher, nor the dispatcher it:
the command line composes them (``for_daemon``).
"""

from effectusd.console.app import Console, for_daemon, serve

__all__ = ["Console", "for_daemon", "serve"]

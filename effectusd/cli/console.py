"""The operator console alone: effectusd console (docs/operations.md section 8)."""

from __future__ import annotations

import click

from effectusd.backends.errors import UNAVAILABLE
from effectusd.cli.app import EXIT_FAILURE, EXIT_INVALID, EXIT_PENDING, Context, fail, main
from effectusd.config import ConfigError
from effectusd.core.errors import SchemaNotReady


@main.command("console")
@click.option("--host", help="Address to listen on (default: console.host, 127.0.0.1).")
@click.option("--port", type=click.IntRange(0, 65535), help="Port (default: console.port, 8089).")
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]),
    help="Lowest level of log line to print.",
)
@click.pass_obj
def console_command(obj: Context, host: str | None, port: int | None, log_level: str) -> None:
    """Serve the operator console and admin API without a daemon.

    Loopback only unless [console.tokens] names at least one token; reads need a token when
    any is configured, actions a write-scoped one (docs/operations.md section 8).
    """
    import asyncio

    from effectusd.console import serve
    from effectusd.logs import configure_logging

    config = obj.config
    configure_logging(config.observability.log_format, log_level)
    backend = obj.backend
    try:
        with obj.connect() as conn:
            backend.require_current(conn)
        where = (host or config.console.host, config.console.port if port is None else port)
        asyncio.run(serve(config, backend, *where))
    except ConfigError as exc:
        fail(str(exc), EXIT_INVALID)
    except SchemaNotReady as exc:
        fail(str(exc), EXIT_PENDING)
    except UNAVAILABLE as exc:
        fail(f"database: {str(exc).strip()}", EXIT_FAILURE)
    except KeyboardInterrupt:
        pass

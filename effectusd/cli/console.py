"""The operator console alone: effectusd console (docs/operations.md section 8)."""

from __future__ import annotations

import click

from effectusd.cli.app import Context, listening, log_level_option, main
from effectusd.cli.stores import store_option


@main.command("console")
@click.option("--host", help="Address to listen on (default: console.host, 127.0.0.1).")
@click.option("--port", type=click.IntRange(0, 65535), help="Port (default: console.port, 8089).")
@log_level_option
@store_option("Serve this store of [database.stores] (the console serves one store).")
@click.pass_obj
def console_command(
    obj: Context, host: str | None, port: int | None, log_level: str, store_label: str | None
) -> None:
    """Serve the operator console and admin API without a daemon.

    Loopback only unless [console.tokens] names at least one token; reads need a token when
    any is configured, actions a write-scoped one (docs/operations.md section 8).
    """
    import asyncio

    from effectusd.console import serve
    from effectusd.logs import configure_logging

    obj.selected = store_label
    store = obj.store()
    config, backend = store.config, store.backend
    configure_logging(config.observability.log_format, log_level)
    try:
        with store.connect() as conn:
            backend.migrator.require_current(conn)
        where = (host or config.console.host, config.console.port if port is None else port)
        with listening(*where, "--port (console.port)"):
            asyncio.run(serve(config, backend, *where))
    except KeyboardInterrupt:
        pass

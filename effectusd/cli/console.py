"""The operator console alone: effectusd console (docs/operations.md section 8)."""

from __future__ import annotations

import click

from effectusd.cli.app import (
    EXIT_FAILURE,
    Context,
    StoreContext,
    fail,
    listening,
    log_level_option,
    main,
)
from effectusd.cli.stores import store_option, warn
from effectusd.store.across import each_store


@main.command("console")
@click.option("--host", help="Address to listen on (default: console.host, 127.0.0.1).")
@click.option("--port", type=click.IntRange(0, 65535), help="Port (default: console.port, 8089).")
@log_level_option
@store_option("Serve only this store of [database.stores] (default: every store).")
@click.pass_obj
def console_command(
    obj: Context, host: str | None, port: int | None, log_level: str, store_label: str | None
) -> None:
    """Serve the operator console and admin API without a daemon.

    Loopback only unless [console.tokens] names at least one token; reads need a token when
    any is configured, actions a write-scoped one (docs/operations.md section 8). With
    several [database.stores], it serves every one (--store: that one alone); a store that
    cannot be reached at start is named and the others are served.
    """
    import asyncio

    from effectusd.console import serve
    from effectusd.logs import configure_logging

    stores = obj.stores(store_label)
    config = obj.config
    configure_logging(config.observability.log_format, log_level)
    try:
        _require_current(stores)
        where = (host or config.console.host, config.console.port if port is None else port)
        with listening(*where, "--port (console.port)"):
            asyncio.run(serve(config, stores, *where))
    except KeyboardInterrupt:
        pass


def _require_current(stores: list[StoreContext]) -> None:
    """The single store must be reachable and migrated (exit 1 or 3 naming it); of several,
    one that is not is named on stderr and the console still serves it (its pages say it
    could not be read until it is back), unless none is."""

    def check(store: StoreContext) -> None:
        with store.open() as conn:
            store.backend.migrator.require_current(conn)

    if len(stores) == 1:
        with stores[0].connect() as conn:
            stores[0].backend.migrator.require_current(conn)
        return
    done, unreached = each_store(stores, check)
    warn(unreached, "read")
    if not done:
        fail("no store could be read; the console serves none", EXIT_FAILURE)

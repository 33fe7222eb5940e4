"""The daemon and its benchmark: run, bench."""

from __future__ import annotations

import sys

import click
import psycopg

from effectusd.cli.app import (
    EXIT_CONFLICT,
    EXIT_FAILURE,
    EXIT_INVALID,
    Context,
    emit,
    fail,
    json_option,
    main,
)
from effectusd.config import ConfigError
from effectusd.store.postgres import migrations


@main.command()
@click.option(
    "--until-idle",
    is_flag=True,
    help="Exit 0 once nothing is queued, in flight or due within a short wait.",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 10_000),
    help="Concurrent calls overall (overrides dispatcher.concurrency).",
)
@click.option("--log-format", type=click.Choice(["text", "json"]), help="Log line format.")
@click.option(
    "--http-port",
    type=click.IntRange(0, 65535),
    help="Serve /metrics, /healthz and /readyz on this loopback port (0: any free port).",
)
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]),
)
@click.pass_obj
def run(
    obj: Context,
    until_idle: bool,
    workers: int | None,
    log_format: str | None,
    http_port: int | None,
    log_level: str,
) -> None:
    """Run the dispatcher daemon (SIGTERM drains in-flight calls and exits 0)."""
    import asyncio

    from effectusd.dispatcher.daemon import Daemon
    from effectusd.logs import configure_logging

    config = obj.config
    if workers is not None:
        config.dispatcher.concurrency = workers
    if http_port is not None:
        config.observability.http_port = http_port
    configure_logging(log_format or config.observability.log_format, log_level)
    daemon = Daemon(config, obj.database_url)
    try:
        code = asyncio.run(daemon.run(until_idle=until_idle))
    except ConfigError as exc:
        fail(str(exc), EXIT_INVALID)
    except migrations.MigrationError as exc:
        fail(str(exc), EXIT_CONFLICT)
    except psycopg.OperationalError as exc:
        fail(f"database: {str(exc).strip()}", EXIT_FAILURE)
    sys.exit(code)


@main.command()
@click.option("--sagas", default=1000, show_default=True, type=click.IntRange(1, 1_000_000))
@click.option("--steps", default=5, show_default=True, type=click.IntRange(1, 100))
@click.option("--concurrency", default=32, show_default=True, type=click.IntRange(1, 10_000))
@click.option("--destination", help="Drive this HTTP endpoint instead of the built-in no-op one.")
@click.option(
    "--transport",
    type=click.Choice(["httpx", "aiohttp"]),
    help="HTTP transport to measure (default: the destination default, aiohttp).",
)
@json_option
@click.pass_obj
def bench(
    obj: Context,
    sagas: int,
    steps: int,
    concurrency: int,
    destination: str | None,
    transport: str | None,
    as_json: bool,
) -> None:
    """Measure steps/s, enqueue→dispatch latency and commits per step (uses a scratch DB on
    the configured server, dropped afterwards)."""
    from dataclasses import asdict

    from effectusd.bench import format_result, run_bench

    def progress(message: str) -> None:
        click.echo(message, err=True)

    try:
        result = run_bench(
            obj.database_url, sagas, steps, concurrency, destination, progress, transport
        )
    except psycopg.OperationalError as exc:
        fail(f"database: {str(exc).strip()}", EXIT_FAILURE)
    emit(asdict(result), as_json, lambda _: format_result(result))

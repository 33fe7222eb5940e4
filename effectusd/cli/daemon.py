"""The daemon and its benchmark: run, bench."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from datetime import timedelta

import click

from effectusd.backends.errors import UNAVAILABLE
from effectusd.backends.migrations import MigrationError
from effectusd.cli.app import (
    EXIT_CONFLICT,
    EXIT_INVALID,
    Context,
    Duration,
    StoreContext,
    cannot_connect,
    emit,
    fail,
    json_option,
    listening,
    log_level_option,
    main,
)
from effectusd.cli.stores import store_option
from effectusd.config import Config
from effectusd.core.database_url import (
    PostgresDatabase,
    SqliteDatabase,
    parse_database_url,
)
from effectusd.core.errors import SchemaNotReady
from effectusd.core.stores import Store
from effectusd.executors.factory import EXECUTOR_CLASSES


class ProcessCount(click.ParamType[int | None]):
    """A number of processes from 1 to 256, or `auto` (None: decided once the store is known)."""

    name = "N|auto"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> int | None:
        if value is None or isinstance(value, int):
            return value
        if str(value).strip().lower() == "auto":
            return None
        try:
            count = int(str(value))
        except ValueError:
            self.fail("a whole number from 1 to 256, or auto", param, ctx)
        if not 1 <= count <= 256:
            self.fail(f"{count} is not in the range 1 to 256", param, ctx)
        return count


def auto_processes(sqlite: bool) -> int:
    """One dispatcher process per CPU this process may be scheduled on (its affinity, which
    containers and taskset narrow), at most 256; 1 on SQLite, whose one write lock the
    processes would only queue on."""
    if sqlite:
        return 1
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 256))


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
    "--console",
    "console",
    is_flag=True,
    help="Also serve the operator console and admin API on the --http-port server "
    "(as [console] enabled = true does).",
)
@log_level_option
@click.option(
    "--processes",
    default="1",
    show_default=True,
    type=ProcessCount(),
    help=(
        "Run this many dispatcher processes, each with its own owner id (on SQLite: on this "
        "host, sharing the file); `auto`: one per CPU this process may run on, on PostgreSQL "
        "(on SQLite, where every process queues on the one write lock, auto is 1). "
        "Limits (concurrency, --workers, each destination's max_concurrency, the pool) apply "
        "per process; with several stores each process serves every store; with "
        "--http-port PORT, process i (from 0) serves PORT+i. The parent "
        "forwards SIGTERM and SIGINT, stops the others when one fails, and exits with the "
        "first failure's code."
    ),
)
@store_option(
    "Serve only this store of [database.stores] (default: every store, from this process)."
)
@click.pass_obj
def run(
    obj: Context,
    until_idle: bool,
    workers: int | None,
    log_format: str | None,
    http_port: int | None,
    log_level: str,
    processes: int | None,
    console: bool,
    store_label: str | None,
) -> None:
    """Run the dispatcher daemon, of every configured store (SIGTERM drains in-flight calls
    and exits 0)."""
    import asyncio

    from effectusd.console import for_daemon
    from effectusd.dispatcher.daemon import Daemon
    from effectusd.logs import configure_logging

    stores = obj.stores(store_label)
    store = stores[0]
    config = store.config if len(stores) == 1 else obj.config
    if workers is not None:
        config.dispatcher.concurrency = workers
    if http_port is not None:
        config.observability.http_port = http_port
    if console:
        config.console.enabled = True
    configure_logging(log_format or config.observability.log_format, log_level)
    if processes is None:
        processes = auto_processes(isinstance(parse_database_url(store.url), SqliteDatabase))
    if processes > 1:
        _run_processes(obj, stores, processes, until_idle, workers, log_format, log_level, console)
    if len(stores) > 1:
        sys.exit(_run_fleet(config, stores, until_idle))
    daemon = Daemon(
        config, store.url, web=for_daemon(config, store.backend), store_label=store.label
    )
    if store.label is not None:  # a store of [database.stores]: its namespace's rows alone
        daemon.namespace = config.namespace
    observability = config.observability
    try:
        with listening(
            observability.http_host,
            observability.http_port,
            "--http-port (observability.http_port)",
        ):
            code = asyncio.run(daemon.run(until_idle=until_idle))
    except SchemaNotReady:
        raise  # exits 6 (EffectusGroup): SchemaBehind too, though it is a MigrationError
    except MigrationError as exc:
        fail(str(exc), EXIT_CONFLICT)
    except UNAVAILABLE as exc:  # the daemon rides out a database lost once it has started
        cannot_connect(exc, store.name)
    sys.exit(code)


def _run_fleet(config: Config, stores: Sequence[StoreContext], until_idle: bool) -> int:
    """Serve several stores from this process (a store that cannot be served is reported and
    tried again; the others are served meanwhile)."""
    import asyncio

    from effectusd.dispatcher.fleet import Fleet

    fleet = Fleet(
        config, [Store(store.label, store.url, store.config.namespace) for store in stores]
    )
    observability = config.observability
    with listening(
        observability.http_host, observability.http_port, "--http-port (observability.http_port)"
    ):
        return asyncio.run(fleet.run(until_idle=until_idle))


def require_postgres(url: str, what: str) -> None:
    """Exit 3 unless ``url`` names a PostgreSQL database; ``what`` says who needs it."""
    database = parse_database_url(url)  # a DatabaseURLError exits 3 (EffectusGroup)
    if not isinstance(database, PostgresDatabase):
        fail(
            f"{what} needs PostgreSQL; the database URL names a {database.dialect} one",
            EXIT_INVALID,
        )


def child_run_args(
    index: int,
    *,
    until_idle: bool,
    workers: int | None,
    log_format: str | None,
    log_level: str,
    http_port: int | None,
    console: bool = False,
    store: str | None = None,
) -> list[str]:
    """The `run` options of child ``index`` (from 0) of `run --processes`: the parent's own,
    with the observability port shifted by the index (0, any free port, stays 0)."""
    args = ["--log-level", log_level]
    if until_idle:
        args.append("--until-idle")
    if workers is not None:
        args += ["--workers", str(workers)]
    if log_format is not None:
        args += ["--log-format", log_format]
    if http_port is not None:
        args += ["--http-port", str(http_port + index if http_port else 0)]
    if console:
        args.append("--console")
    if store is not None:
        args += ["--store", store]
    return args


def _run_processes(
    obj: Context,
    stores: Sequence[StoreContext],
    processes: int,
    until_idle: bool,
    workers: int | None,
    log_format: str | None,
    log_level: str,
    console: bool,
) -> None:
    from effectusd.dispatcher.processes import child_command, supervise

    port = (stores[0].config if len(stores) == 1 else obj.config).observability.http_port
    if port and port + processes - 1 > 65535:
        fail(
            f"--processes {processes} from --http-port {port} would need ports up to "
            f"{port + processes - 1}; the last port is 65535",
            EXIT_INVALID,
        )
    global_args: Sequence[str] = ["--config", obj.config_path] if obj.config_path else []
    commands = [
        child_command(
            global_args,
            child_run_args(
                index,
                until_idle=until_idle,
                workers=workers,
                log_format=log_format,
                log_level=log_level,
                http_port=port,
                console=console,
                store=stores[0].label if len(stores) == 1 else None,
            ),
        )
        for index in range(processes)
    ]
    # the URLs travel in the environment, not on command lines anyone can read with ps; a
    # labelled store's as LABEL=URL, which overrides that store's alone (one line each)
    urls = [store.url if store.label is None else f"{store.label}={store.url}" for store in stores]
    sys.exit(supervise(commands, env={"EFFECTUSD_DATABASE_URL": "\n".join(urls)}))


@main.command()
@click.option("--sagas", default=1000, show_default=True, type=click.IntRange(1, 1_000_000))
@click.option("--steps", default=5, show_default=True, type=click.IntRange(1, 100))
@click.option("--concurrency", default=32, show_default=True, type=click.IntRange(1, 10_000))
@click.option("--destination", help="Drive this HTTP endpoint instead of the built-in no-op one.")
@click.option(
    "--transport",
    type=click.Choice(sorted(EXECUTOR_CLASSES)),
    help="HTTP transport to measure (default: the destination default, asyncio).",
)
@click.option(
    "--delivery",
    type=click.Choice(["at_most_once", "at_least_once"]),
    default="at_most_once",
    show_default=True,
    help="The bench verb's delivery (at_least_once steps may wait in the daemon for a slot).",
)
@click.option(
    "--backlog",
    default=1_000_000,
    show_default=True,
    type=click.IntRange(0, 100_000_000),
    help=(
        "Also time the claim statement on an empty outbox and over this many ready rows "
        "(p50/p99 and the p99 ratio; building 1,000,000 takes minutes and ~2 GB); 0 skips it."
    ),
)
@click.option(
    "--duration",
    default="0s",
    show_default=True,
    type=Duration(at_most="7d"),
    help=(
        "Also soak: keep submitting sagas at the measured pace for this long (with a unit: "
        "10m, 1h) while sampling the daemon's RSS every few seconds (start, end, max; steps/s "
        "over the soak)."
    ),
)
@click.option(
    "--processes",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    help=(
        "Dispatch with this many daemon processes side by side (as `run --processes`), each "
        "with --concurrency; reports their CPU per step and the database's commits/s and WAL/s."
    ),
)
@click.option(
    "--stores",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    help=(
        "Split the sagas among this many scratch databases, each a store with its own "
        "namespace, served by one daemon process (as `run` serves [database.stores]); "
        "reports the connections each store used. Not with --processes or --duration."
    ),
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
    delivery: str,
    backlog: int,
    duration: timedelta,
    processes: int,
    stores: int,
    as_json: bool,
) -> None:
    """Measure steps/s, enqueue→dispatch latency, commits per step and, by default, claim
    latency over a large backlog (uses scratch DBs on the configured PostgreSQL server,
    dropped afterwards)."""
    from dataclasses import asdict

    from effectusd.bench import format_result, run_bench

    require_postgres(obj.database_url, "bench (it makes scratch databases on the server)")
    if stores > 1 and (processes > 1 or duration):
        raise click.UsageError("--stores above 1 is benched in one process, without --duration")

    def progress(message: str) -> None:
        click.echo(message, err=True)

    result = run_bench(
        obj.database_url,
        sagas,
        steps,
        concurrency,
        destination,
        progress,
        transport,
        backlog=backlog,
        duration=duration.total_seconds(),
        processes=processes,
        delivery=delivery,
        stores=stores,
    )
    emit(asdict(result), as_json, lambda _: format_result(result))

"""The effectusd command line (docs/configuration.md section 3).

Exit codes scripts can rely on: 0 success; 1 operational failure (database unreachable, …);
2 usage error (click's own, and our checks of option values); 3 invalid input (plan, facts or
config, including the database URL, a duration without its unit (option or key alike), a
port that cannot be listened on, and a server that takes no writes for a command that writes);
4 conflict (the state or an existing saga does not allow it); 5 not found; 6 the schema needs
`effectusd migrate` (pending migrations, or none at all).
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from effectusd.backends import Backend, Connection
from effectusd.backends.errors import UNAVAILABLE, unavailable_text
from effectusd.client import Client
from effectusd.config import Config, ConfigError, load_config, not_utf8, override_database_urls
from effectusd.core.canonical import MAX_JSON_DEPTH, parse_json
from effectusd.core.checker import PlanCheckError
from effectusd.core.database_url import DatabaseURLError
from effectusd.core.display import json_document
from effectusd.core.durations import parse_duration
from effectusd.core.errors import SchemaNotReady
from effectusd.core.replication import ReadOnlyServer
from effectusd.core.stores import Store
from effectusd.store.sql import store_backend

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INVALID = 3
EXIT_CONFLICT = 4
EXIT_NOT_FOUND = 5
EXIT_PENDING = 6


class StoreContext:
    """One store a command works on: its label (None for the single ``[database] url``), its
    backend, and the configuration with the store's namespace."""

    def __init__(self, store: Store, config: Config) -> None:
        self.label = store.label
        self.name = store.name
        self.config = config
        if config.namespace != store.namespace:
            self.config = config.model_copy(update={"namespace": store.namespace})
        try:
            self.backend = store_backend(store.url)  # a DatabaseURLError exits 3 (EffectusGroup)
        except DatabaseURLError as exc:
            if store.label is None:
                raise
            raise DatabaseURLError(f"{store.name}: {exc}") from None  # its text quotes no URL

    @property
    def url(self) -> str:
        return self.backend.url

    def client(self) -> Client:
        return Client(self.config, database_url=self.url)

    @contextmanager
    def open(self, *, create: bool = False, write: bool = False) -> Iterator[Connection]:
        """A connection to this store. ``write``: the command writes, so a server that takes
        no writes raises ReadOnlyServer first; that and a store that cannot be reached raise
        (a command over several stores names the store and goes on to the others)."""
        runner = self.backend.runner
        with runner.connect(create=create) as conn:
            if write:
                runner.check_writable(conn)
            yield conn

    @contextmanager
    def connect(self, *, create: bool = False, write: bool = False) -> Iterator[Connection]:
        """``open``, for a command on this store alone: unreachable, exit 1 naming it (never
        its URL or the driver's text); read-only, the daemon's line and exit code
        (EffectusGroup)."""
        with ExitStack() as stack:
            try:
                conn = stack.enter_context(self.open(create=create, write=write))
            except UNAVAILABLE as exc:
                cannot_connect(exc, self.name)
            yield conn


class Context:
    def __init__(self, config_path: str | None, database_urls: Sequence[str] = ()) -> None:
        self.config_path = config_path
        self._database_urls = list(database_urls)
        self._config: Config | None = None
        self.selected: str | None = None  # --store LABEL of the command, if it has one
        # Each store's URL parsed once, when a command first asks for it.
        self._stores: dict[str | None, StoreContext] = {}

    @property
    def config(self) -> Config:
        if self._config is None:
            path = self.config_path
            if path is None and Path("effectusd.toml").exists():
                path = "effectusd.toml"
            config = load_config(path)  # a ConfigError exits 3 (EffectusGroup)
            override_database_urls(config, self._database_urls, "--database-url")
            self._config = config
        return self._config

    def stores(self, label: str | None = None) -> list[StoreContext]:
        """The stores a command works on: every configured one, or the one ``label`` (or the
        command's --store) names; an unknown label is a usage error (exit 2)."""
        label = label or self.selected
        stores = self.config.stores()
        if label is not None:
            labels = [store.label for store in stores if store.label is not None]
            if label not in labels:
                known = ", ".join(labels) if labels else "none (the config has no database.stores)"
                fail(f"--store {label}: no such store; stores: {known}", EXIT_USAGE)
            stores = [store for store in stores if store.label == label]
        return [self._store_context(store) for store in stores]

    def _store_context(self, store: Store) -> StoreContext:
        if store.label not in self._stores:
            self._stores[store.label] = StoreContext(store, self.config)
        return self._stores[store.label]

    def store(self) -> StoreContext:
        """The one store of a command that works on one: with several configured and none
        chosen, exit 3 naming them."""
        stores = self.stores()
        if len(stores) > 1:
            command = click.get_current_context().command_path
            labels = ", ".join(str(store.label) for store in stores)
            fail(
                f"{command} works on one store and database.stores lists {len(stores)} ({labels})",
                EXIT_INVALID,
            )
        return stores[0]

    @property
    def database_url(self) -> str:
        return self.store().url

    @property
    def backend(self) -> Backend:
        """The store's backend, its URL parsed once; a DatabaseURLError exits 3
        (EffectusGroup)."""
        return self.store().backend

    def client(self) -> Client:
        return self.store().client()

    def connect(
        self, *, create: bool = False, write: bool = False
    ) -> AbstractContextManager[Connection]:
        """A connection to the command's one store (StoreContext.connect)."""
        return self.store().connect(create=create, write=write)

    def check_writable(self) -> None:
        """For a command that writes on connections of its own (submit, through the client)."""
        with self.connect(write=True):
            pass


def fail(message: str, code: int) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


# Why a port cannot be listened on: in use, not this host's, or privileged. A setting to
# change, so one line and exit 3 rather than a traceback.
UNBINDABLE = frozenset({errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES})


@contextmanager
def listening(host: str, port: int | None, setting: str) -> Iterator[None]:
    """Exit 3 in one line if what runs inside cannot listen on ``host:port``; ``setting``
    names the option (and config key) that chose the port."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in UNBINDABLE:
            raise
        fail(
            f"cannot serve on {host}:{port}: {exc.strerror}; choose another {setting}, or "
            "stop what holds it",
            EXIT_INVALID,
        )


def cannot_connect(error: BaseException, name: str = "the database") -> NoReturn:
    """Exit 1 for a database that could not be reached, never quoting the driver's message;
    ``name``: how to name it (a store's label with several)."""
    fail(f"cannot connect to {name}: {unavailable_text(error)}", EXIT_FAILURE)


def emit(data: Any, as_json: bool, human: Callable[[Any], str]) -> None:
    if as_json:
        click.echo(json_document(data, indent=2))
    else:
        click.echo(human(data))


def read_json_file(path: str, what: str) -> Any:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        fail(f"{path}: cannot read {what}: {exc.strerror}", EXIT_INVALID)
    except UnicodeDecodeError as exc:
        fail(f"{path}: {what} {not_utf8(exc)}", EXIT_INVALID)
    try:
        return parse_json(text, MAX_JSON_DEPTH)
    except ValueError as exc:
        fail(f"{path}: {exc}", EXIT_INVALID)


def report_check_error(source: str, error: PlanCheckError) -> NoReturn:
    click.echo(f"{source}: {len(error.issues)} problem(s):", err=True)
    for issue in error.issues:
        click.echo(f"  {issue}", err=True)
    sys.exit(EXIT_INVALID)


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
log_level_option = click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]),
    help="Lowest level of log line to print.",
)


if TYPE_CHECKING:
    _ParamType = click.ParamType[timedelta | None]
else:  # click before 8.2 has no type parameters at run time
    _ParamType = click.ParamType


class InvalidValue(click.BadParameter):
    """An option value that is not what the option takes: invalid input (exit 3), as the same
    value in the config file is, rather than a usage error."""

    exit_code = EXIT_INVALID


class Duration(_ParamType):
    """A duration option (30d, 12h, 90m, 45s, 500ms), read as the config reads one: a bare
    number is refused (exit 3, the option named, both readings offered): `--older-than 30`
    meant days more often than seconds. ``never=True`` also takes "never" (None);
    ``at_most`` refuses a longer one."""

    name = "duration"

    def __init__(self, *, never: bool = False, at_most: str | None = None) -> None:
        self.never = never
        self.at_most = at_most
        self.limit = None if at_most is None else parse_duration(at_most)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value is None or isinstance(value, timedelta):
            return value
        text = str(value).strip()
        if self.never and text == "never":
            return None
        try:
            duration = parse_duration(text)
        except ValueError as exc:
            raise InvalidValue(str(exc), ctx=ctx, param=param) from None
        if self.limit is not None and duration > self.limit:
            raise InvalidValue(f"longer than the limit of {self.at_most}", ctx=ctx, param=param)
        return duration


class EffectusGroup(click.Group):
    """Errors any command can meet, reported the same way by all of them: a command catches
    only what it answers differently."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SchemaNotReady as exc:
            fail(str(exc), EXIT_PENDING)
        except (DatabaseURLError, ConfigError, ReadOnlyServer) as exc:
            fail(str(exc), EXIT_INVALID)  # ReadOnlyServer: as the daemon refuses to start
        except UNAVAILABLE as exc:
            fail(f"database: {unavailable_text(exc)}", EXIT_FAILURE)


@click.group(cls=EffectusGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    "config_path",
    envvar="EFFECTUSD_CONFIG",
    type=click.Path(dir_okay=False),
    help="TOML config file (env EFFECTUSD_CONFIG; default ./effectusd.toml if present).",
)
@click.option(
    "--database-url",
    "database_urls",
    multiple=True,
    help=(
        "postgresql://… or sqlite:///file.db (env EFFECTUSD_DATABASE_URL; overrides the "
        "config; default sqlite:///effectusd.db). With [database.stores]: LABEL=URL, that "
        "store's URL; repeat it for each store to override."
    ),
)
@click.version_option(package_name="effectusd")
@click.pass_context
def main(ctx: click.Context, config_path: str | None, database_urls: tuple[str, ...]) -> None:
    """effectusd: a transactional-outbox saga dispatcher.

    Exit codes: 0 ok, 1 operational failure, 2 usage, 3 invalid input, 4 conflict,
    5 not found, 6 the schema needs `effectusd migrate`.
    """
    ctx.obj = Context(config_path, database_urls)

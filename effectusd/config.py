"""The TOML configuration (docs/configuration.md section 1) as pydantic models.

Every error names the file, the key and the reason, e.g.
``effectusd.toml: destinations.payments.headers.Idempotency-Key: reserved header``.
"""

from __future__ import annotations

import json
import logging
import os
import tomllib
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from effectusd.core.answers import DECLARED, Preset
from effectusd.core.contracts import VerbContract
from effectusd.core.database_url import PostgresDatabase, parse_database_url
from effectusd.core.durations import Duration
from effectusd.core.errors import EffectusError
from effectusd.core.probes import DEFAULT_CLOCK_SKEW
from effectusd.core.registry import DEFAULT_FENCE_WAIT_LIMIT, Registry
from effectusd.core.states import OutcomeClass
from effectusd.core.stores import (
    Store,
    authority_problem,
    env_urls,
    label_problem,
    labelled_url,
    store_conflicts,
)
from effectusd.core.wire import has_control, is_reserved_header, is_token

CREDENTIAL_HEADERS = frozenset({"authorization", "cookie", "cookie2", "set-cookie"})
# Headers that frame the message or manage the connection: the transport writes them for the
# body it sends. Set in config they contradict it (a chunked or gzip claim on a plain body)
# and every call fails, possibly after leaving: refused like the reserved ones.
TRANSPORT_HEADERS = frozenset(
    {
        "transfer-encoding",
        "content-encoding",
        "content-length",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "proxy-connection",
        "host",
    }
)
CREDENTIAL_NAME_PARTS = ("api-key", "apikey", "api_key", "token", "secret", "password")
DEFAULT_DATABASE_URL = "sqlite:///effectusd.db"  # the embedded default for one machine
# Keys earlier releases accepted that nothing reads any more: a file holding one still loads,
# with a warning naming the key (refusing it would stop a daemon over a key that did nothing).
REMOVED_KEYS = {
    ("fencing", "lease_ttl"): "never read: a dispatch's lease is its call timeout plus "
    "dispatcher.lease_margin",
}

log = logging.getLogger("effectusd.config")


def is_credential_header(name: str) -> bool:
    """A header that carries a credential, which a config file must never hold in clear."""
    lowered = name.strip().lower()
    return (
        lowered in CREDENTIAL_HEADERS
        or lowered.startswith("proxy-")
        or any(part in lowered for part in CREDENTIAL_NAME_PARTS)
    )


class ConfigError(EffectusError, ValueError):
    """A configuration that cannot be used. The message names file, key and reason."""


def not_utf8(error: UnicodeDecodeError) -> str:
    """Why a file could not be read as UTF-8 text, without quoting what it holds."""
    return f"is not UTF-8 text (byte {error.start + 1} cannot be decoded); save it as UTF-8"


def _database_url(value: str) -> str:
    parse_database_url(value)  # DatabaseURLError (a ValueError) names what is wrong
    return value


class StoreConfig(BaseModel):
    """One of several stores (``[database.stores.LABEL]``): its database and the namespace
    whose sagas it holds (docs/operations.md section 10)."""

    model_config = ConfigDict(extra="forbid")
    url: str
    namespace: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")

    _known_store = field_validator("url")(_database_url)


class DatabaseConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str = DEFAULT_DATABASE_URL
    # Several stores, by label; without them `url` (and the top-level namespace) is the one.
    stores: dict[str, StoreConfig] = Field(default_factory=dict)
    pool_min_size: int = Field(default=2, ge=1)
    pool_max_size: int = Field(default=10, ge=1)
    # PostgreSQL with standbys: refuse to run (at start, and on each reconnect) on a server whose
    # standbys commits do not wait for, where a failover may make an at_most_once step be sent
    # twice (docs/operations.md section 9). Off: the daemon warns instead.
    require_synchronous_replication: bool = False

    _known_store = field_validator("url")(_database_url)

    @field_validator("stores", mode="before")
    @classmethod
    def _labels(cls, value: Any) -> Any:
        problems = [label_problem(str(k)) for k in value] if isinstance(value, dict) else []
        if any(problems):
            raise ValueError("; ".join(p for p in problems if p))
        return value

    @model_validator(mode="after")
    def _stores_apart(self) -> DatabaseConfig:
        if self.stores and "url" in self.model_fields_set:
            raise ValueError(
                "url and stores: give one of them (url is the one store; stores lists several, "
                "each with its url and namespace)"
            )
        problems = store_conflicts({k: (v.url, v.namespace) for k, v in self.stores.items()})
        if problems:
            raise ValueError("stores: " + "; ".join(problems))
        return self


class DispatcherConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    concurrency: int = Field(default=64, ge=1, le=10_000)
    lease_margin: Duration = timedelta(seconds=30)
    batch_size: int = Field(default=64, ge=1, le=10_000)
    # How often an idle daemon looks for due work without being woken. PostgreSQL wakes it by
    # LISTEN/NOTIFY, so polling is only the fallback there (1s); SQLite has no notifications,
    # so the daemon polls it often (50ms, a cheap indexed read).
    poll_interval: Duration | None = None

    def poll_seconds(self, default: float) -> float:
        """``poll_interval``, else the store's ``default`` (its backend's poll_interval_s)."""
        if self.poll_interval is not None:
            return self.poll_interval.total_seconds()
        return default

    shutdown_grace: Duration = timedelta(seconds=30)


class FencingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # "store": tokens kept by the database itself (durable_monotonic; "postgres" is the same
    # thing under its first name). "memory": local_advisory, tests only.
    provider: Literal["store", "postgres", "memory"] = "store"
    test_setup: bool = False
    # How long a dispatch waits for a resource another dispatch holds before it is blocked
    # (blocked_fence). Unset: Config.fence_wait_limit(), longer than any dead holder's lease.
    wait_limit: Duration | None = None
    # The fencing authority: the PostgreSQL database that issues the fencing tokens of every
    # store (docs/design.md section 8). Needed with several stores and a fenced verb.
    url: str | None = None

    @field_validator("url")
    @classmethod
    def _authority_url(cls, value: str | None) -> str | None:
        if value is not None and not isinstance(parse_database_url(value), PostgresDatabase):
            raise ValueError("names a SQLite database; the fencing authority is PostgreSQL")
        return value


class ObservabilityConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    http_host: str = "127.0.0.1"
    http_port: int | None = Field(default=None, ge=0, le=65535)
    log_format: Literal["text", "json"] = "text"
    # /healthz and /readyz turn red when a batch of outcomes has waited this long to be
    # recorded, the store has refused writes this long, or a background loop has died.
    unhealthy_after: Duration = timedelta(seconds=30)


ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"


class ConsoleToken(BaseModel):
    """One console credential, by reference: the environment variable that holds it, and what
    it may do. Its table key names it; actions taken with it are recorded as console:NAME."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    env: str = Field(pattern=ENV_NAME)
    scope: Literal["read", "write"] = "read"


class ConsoleConfig(BaseModel):
    """The operator console and admin API (docs/operations.md section 8)."""

    model_config = ConfigDict(extra="forbid")
    # Served by `run` on the observability port when true (`run --console` sets it too).
    enabled: bool = False
    # `effectusd console` binds here; `run` serves the console on observability.http_host.
    host: str = "127.0.0.1"
    port: int = Field(default=8089, ge=0, le=65535)
    tokens: dict[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")], ConsoleToken] = Field(
        default_factory=dict
    )
    # Without tokens the console answers only on loopback and only reads. A single-user
    # machine may let it act too; forms still need their CSRF token.
    loopback_actions: bool = False
    session_ttl: Duration = timedelta(hours=8)


class DestinationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str
    timeout: Duration = timedelta(seconds=10)
    connect_timeout: Duration = timedelta(seconds=5)
    max_concurrency: int = Field(default=16, ge=1, le=10_000)
    # Probes in flight to this destination at once, beside its calls (never in their slots):
    # it may see max_concurrency + probe_concurrency connections (docs/design.md section 7).
    probe_concurrency: int = Field(default=2, ge=1, le=1_000)
    headers: dict[str, str] = Field(default_factory=dict)
    bearer_token_env: str | None = None
    verify_tls: bool = True
    ca_file: str | None = None
    max_response_bytes: int = Field(default=1_048_576, ge=1)
    # False: a new connection per call, so no answer can ever be read from a connection that
    # an earlier exchange left bytes on (for destinations that do not echo the request ID).
    keep_alive: bool = True
    status_map: dict[int, OutcomeClass] = Field(default_factory=dict)
    # What a non-2xx answer means when neither X-Effectus-Outcome nor status_map says:
    # "declared" (unknown), or "http" (RFC 9110's meaning where it is safe: effectusd.core.answers)
    answers: Preset = DECLARED
    # the HTTP client: asyncio's own transports (the default), aiohttp or httpx; all classify alike
    transport: Literal["httpx", "aiohttp", "asyncio"] = "asyncio"
    # Commits nothing under a key past the request's X-Effectus-Deadline plus clock_skew (the
    # kit does): a probe's "not committed" is then acted on (docs/design.md section 7, Probes).
    honours_deadline: bool = False
    clock_skew: Duration = DEFAULT_CLOCK_SKEW

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        if "@" in urlsplit(value).netloc:
            raise ValueError(
                "must not carry credentials (user:password@): set bearer_token_env instead"
            )
        return value.rstrip("/")

    @field_validator("headers")
    @classmethod
    def _no_reserved_headers(cls, value: dict[str, str]) -> dict[str, str]:
        malformed = sorted(json.dumps(name) for name in value if not is_token(name))
        if malformed:
            raise ValueError(
                f"{', '.join(malformed)}: not a valid header name (letters, digits and "
                "!#$%&'*+-.^_`|~ only: no spaces or control characters)"
            )
        reserved = sorted(name for name in value if is_reserved_header(name))
        if reserved:
            raise ValueError(
                f"reserved header(s) {', '.join(reserved)} cannot be set in config "
                "(Idempotency-Key and every X-Effectus-* header belong to the engine)"
            )
        transport = sorted(name for name in value if name.lower() in TRANSPORT_HEADERS)
        if transport:
            raise ValueError(
                f"{', '.join(transport)}: framing and connection headers cannot be set in "
                "config (the HTTP transport writes them for the body it sends)"
            )
        credentials = sorted(name for name in value if is_credential_header(name))
        if credentials:
            raise ValueError(
                f"{', '.join(credentials)}: credentials never go inline in config; set "
                "bearer_token_env to the name of an environment variable holding the token "
                "(sent as Authorization: Bearer)"
            )
        broken = sorted(name for name, text in value.items() if has_control(text))
        if broken:
            raise ValueError(f"{', '.join(broken)}: the value holds control characters")
        return value

    @property
    def connections(self) -> int:
        """The most connections its executor opens: its calls' and its probes' bounds."""
        return self.max_concurrency + self.probe_concurrency

    def bearer_token(self, name: str, environ: Mapping[str, str]) -> str | None:
        """The token ``bearer_token_env`` names, from ``environ`` (None without one).
        ConfigError naming destination ``name`` and the variable, never its value, when the
        variable is unset, empty, or holds what a header cannot carry (a CR or LF inside)."""
        variable = self.bearer_token_env
        if variable is None:
            return None
        token = environ.get(variable)
        where = f"destination {name!r}: environment variable {variable} (bearer_token_env)"
        if token is None:
            raise ConfigError(f"{where} is not set")
        token = token.strip()
        if not token:
            raise ConfigError(f"{where} is empty")
        if not all("!" <= char <= "~" for char in token):
            raise ConfigError(
                f"{where} holds characters not allowed in an HTTP header (a line break, a "
                "space or a control character inside the token)"
            )
        return token

    @field_validator("status_map")
    @classmethod
    def _status_codes(cls, value: dict[int, OutcomeClass]) -> dict[int, OutcomeClass]:
        for code in value:
            if not 100 <= code <= 599:
                raise ValueError(f"status code {code} is not an HTTP status")
        return value


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")

    namespace: str = Field(default="default", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    database: DatabaseConfig = Field(default_factory=DatabaseConfig)
    dispatcher: DispatcherConfig = Field(default_factory=DispatcherConfig)
    fencing: FencingConfig = Field(default_factory=FencingConfig)
    observability: ObservabilityConfig = Field(default_factory=ObservabilityConfig)
    console: ConsoleConfig = Field(default_factory=ConsoleConfig)
    destinations: dict[str, DestinationConfig] = Field(default_factory=dict)
    verbs: dict[str, VerbContract] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _name_verbs(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("verbs"), dict):
            data = dict(data)
            data["verbs"] = {
                name: ({"name": name, **body} if isinstance(body, dict) else body)
                for name, body in data["verbs"].items()
            }
        return data

    @model_validator(mode="after")
    def _verbs_name_known_destinations(self) -> Config:
        missing = [
            f"verbs.{name}.destination: {verb.destination!r} is not a configured destination"
            for name, verb in self.verbs.items()
            if verb.destination not in self.destinations
        ]
        if missing:
            raise ValueError("; ".join(missing))
        return self

    @model_validator(mode="after")
    def _one_authority_for_several_stores(self) -> Config:
        problem = self.authority_problem()
        if problem:
            raise ValueError(problem)
        return self

    def authority_problem(self) -> str | None:
        """Why these stores cannot fence with this ``[fencing]`` (several stores and a fenced
        verb without an authority, or an authority in a store's database), or None."""
        fenced = sorted(name for name, verb in self.verbs.items() if verb.fencing)
        stores = {
            store.name if store.label else "[database] url": store.url for store in self.stores()
        }
        return authority_problem(stores, fenced, self.fencing.url)

    def stores(self) -> list[Store]:
        """The stores this configuration names: each of ``[database.stores]`` by its label,
        else the one ``[database] url`` (no label) with the top-level namespace."""
        if not self.database.stores:
            return [Store(None, self.database.url, self.namespace)]
        return [Store(k, v.url, v.namespace) for k, v in self.database.stores.items()]

    def registry(self) -> Registry:
        """The live verb registry of this configuration: what the daemon, the client, the
        console and the operator commands check plans against and dispatch by."""
        return Registry(
            verbs=dict(self.verbs),
            destination_timeouts={name: dest.timeout for name, dest in self.destinations.items()},
            fence_wait_limit=self.fence_wait_limit(),
        )

    def warnings(self) -> list[str]:
        """What this configuration allows but an operator should change: logged when the
        daemon starts and listed by /readyz (never a reason to refuse)."""
        return [
            f"verbs.{name}.probe.path names no {{key}}: one answer is read for every blocked "
            "dispatch of the verb whose arguments and facts fill it alike; put {key} in it"
            for name, verb in self.verbs.items()
            if verb.probe is not None and not verb.probe.names_key
        ]

    def fence_wait_limit(self) -> timedelta:
        """``fencing.wait_limit``, or by default twice the longest dispatch lease (call timeout
        plus lease margin) and at least 5 minutes: a dead holder's fence has run out by then."""
        if self.fencing.wait_limit is not None:
            return self.fencing.wait_limit
        timeouts = [d.timeout for d in self.destinations.values()]
        timeouts += [v.timeout for v in self.verbs.values() if v.timeout is not None]
        longest_lease = max(timeouts, default=timedelta(0)) + self.dispatcher.lease_margin
        return max(DEFAULT_FENCE_WAIT_LIMIT, 2 * longest_lease)


def _format_validation_error(source: str, error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        lines.append(f"{source}: {key}: {message}" if key else f"{source}: {message}")
    return "\n".join(lines)


def _without_removed_keys(data: dict[str, Any], source: str) -> dict[str, Any]:
    for (table, key), why in REMOVED_KEYS.items():
        section = data.get(table)
        if isinstance(section, dict) and key in section:
            log.warning("%s: %s.%s is ignored (%s); remove it", source, table, key, why)
            data = {**data, table: {name: v for name, v in section.items() if name != key}}
    return data


def parse_config(data: dict[str, Any], source: str = "<config>") -> Config:
    try:
        return Config.model_validate(_without_removed_keys(data, source))
    except ValidationError as exc:
        raise ConfigError(_format_validation_error(source, exc)) from None


def read_toml(file: Path) -> dict[str, Any]:
    """The TOML document in ``file``, or a ConfigError naming the file. A leading UTF-8
    byte order mark is dropped (it is UTF-8 text all the same, as editors on Windows save it)."""
    try:
        return tomllib.loads(file.read_text(encoding="utf-8-sig"))
    except FileNotFoundError:
        raise ConfigError(f"{file}: file not found") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{file}: {not_utf8(exc)}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file}: not valid TOML: {exc}") from None
    except RecursionError:  # tomllib parses nested arrays and tables recursively
        raise ConfigError(f"{file}: not valid TOML: arrays or tables nested too deeply") from None


def load_config(path: str | os.PathLike[str] | None) -> Config:
    """Load a TOML config; no path means defaults. EFFECTUSD_DATABASE_URL overrides the URL."""
    config = Config() if path is None else parse_config(read_toml(Path(path)), str(path))
    env_url = os.environ.get("EFFECTUSD_DATABASE_URL")
    if env_url:
        override_database_urls(config, env_urls(env_url), "EFFECTUSD_DATABASE_URL")
    return config


def override_database_urls(config: Config, values: list[str], source: str) -> None:
    """Apply ``values`` of ``source`` (``--database-url``, or the environment variable): a
    bare URL replaces ``[database] url``, and is refused when ``[database.stores]`` lists
    stores; ``LABEL=URL`` replaces that store's. ConfigError naming the source and the label,
    never a URL."""
    labels = sorted(config.database.stores)
    for value in values:
        label, url = labelled_url(value)
        if label is None and labels:
            raise ConfigError(
                f"{source}: a bare URL names one store, but database.stores lists "
                f"{', '.join(labels)}: give LABEL=URL for the store to override"
            )
        if label is None:
            # parsed where it is read: a DatabaseURLError quotes nothing of it (exit 3)
            config.database.url = _database_url(url)
            continue
        store = config.database.stores.get(label)
        if store is None:
            known = ", ".join(labels) if labels else "none (no database.stores)"
            raise ConfigError(f"{source}: {label}=URL: no store {label!r}; stores: {known}")
        try:
            store.url = _database_url(url)
        except ValueError as exc:
            raise ConfigError(f"{source}: {label}: {exc}") from None
    problems = store_conflicts({k: (v.url, v.namespace) for k, v in config.database.stores.items()})
    if problems:
        raise ConfigError(f"{source}: database.stores: " + "; ".join(problems))
    problem = config.authority_problem()
    if problem:
        raise ConfigError(f"{source}: {problem}")

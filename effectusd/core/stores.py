"""Several stores in one configuration (``[database.stores.LABEL]``): what a label may be, how
a command line names one store's URL (``LABEL=URL``), and which sets of stores are refused.

A store's label names it in every message, never its URL: a URL may carry a password. Pure (no
connection is opened), so the configuration and the command line share it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from effectusd.core.database_url import PostgresDatabase, parse_database_url

STORE_LABEL = r"^[a-z][a-z0-9_-]{0,31}$"
# LABEL=URL, the URL with a scheme (postgresql://, sqlite:///): a libpq keyword/value string
# (host=... dbname=...) is never read as one, whatever its first keyword.
_LABELLED = re.compile(r"^([a-z][a-z0-9_-]{0,31})=([A-Za-z][A-Za-z0-9+.-]*://.*)$", re.DOTALL)
POSTGRES_PORT = 5432


@dataclass(frozen=True)
class Store:
    """One store a command works on: its label (None for the single ``[database] url``), its
    database URL and the namespace whose sagas it holds."""

    label: str | None
    url: str
    namespace: str

    @property
    def name(self) -> str:
        """How messages name it: its label, or "the database" for the single store."""
        return f"store {self.label!r}" if self.label is not None else "the database"


def labelled_url(value: str) -> tuple[str | None, str]:
    """``value`` of ``--database-url`` (or ``EFFECTUSD_DATABASE_URL``) as (label, URL): (None,
    value) for a bare URL, which names the single store."""
    match = _LABELLED.match(value)
    if match is None:
        return None, value
    return match.group(1), match.group(2)


def env_urls(value: str) -> list[str]:
    """The URLs ``EFFECTUSD_DATABASE_URL`` holds: one, or several ``LABEL=URL`` lines (what
    `run --processes` hands its children for several stores). A value that is not all
    ``LABEL=URL`` lines is one URL (a keyword/value string may span lines)."""
    lines = [line for line in value.splitlines() if line.strip()]
    if len(lines) > 1 and all(labelled_url(line)[0] is not None for line in lines):
        return lines
    return [value]


def database_key(url: str) -> tuple[str, ...]:
    """What tells two PostgreSQL URLs apart as databases: hosts (lower case, with their ports,
    5432 unless given) and the database name; the user and password do not make another
    database. A URL that is not of the URL form is compared as written."""
    database = parse_database_url(url)
    if not isinstance(database, PostgresDatabase) or "://" not in url:
        return (url.strip(),)
    parts = urlsplit(url)
    hosts = [_host_port(host) for host in parts.netloc.rpartition("@")[2].split(",")]
    return (*sorted(hosts), parts.path.lstrip("/"))


def _host_port(host: str) -> str:
    """``host[:port]`` (an IPv6 address in brackets) in lower case, with the default port."""
    if host.startswith("["):
        name, _, rest = host.partition("]")
        name, port = name + "]", rest.removeprefix(":")
    else:
        name, _, port = host.partition(":")
    return f"{name.lower()}:{port or POSTGRES_PORT}"


def store_conflicts(stores: Mapping[str, tuple[str, str]]) -> list[str]:
    """Why ``stores`` (label → (url, namespace)) cannot be served together, one reason each
    beginning with the labels; empty when they can. Several stores are PostgreSQL; no two
    share a database or a namespace (saga ids and idempotency keys derive from it: two
    tenants' order-7 would send one key to a shared destination)."""
    problems = []
    if len(stores) > 1:
        problems += [
            f"{label}: its url names a SQLite database; several stores are PostgreSQL (SQLite "
            "is the store for one machine)"
            for label, (url, _) in stores.items()
            if not isinstance(parse_database_url(url), PostgresDatabase)
        ]
    by_namespace = _same(stores, lambda url, namespace: (namespace,))
    problems += [
        f"{labels} have one namespace: saga ids and idempotency keys derive from it, so their "
        "sagas could send one key to a shared destination; give each store its own"
        for labels in by_namespace
    ]
    by_database = _same(stores, lambda url, namespace: database_key(url))
    problems += [f"{labels} name one database: give each store its own" for labels in by_database]
    return problems


def authority_problem(
    stores: Mapping[str, str], fenced_verbs: list[str], authority: str | None
) -> str | None:
    """Why ``stores`` (each store's name in messages → its url) cannot fence ``fenced_verbs``
    with the fencing authority at ``authority`` (None: none configured), or None. Several
    stores each issuing their own tokens would interleave them for one resource, so a
    destination's watermark would refuse honest calls and could take a zombie's: with several
    stores, tokens come from the authority. The authority is a database of its own (its schema
    is not a store's)."""
    if authority is None:
        if len(stores) > 1 and fenced_verbs:
            return (
                f"fencing.url: verb(s) {', '.join(fenced_verbs)} are fenced and database.stores "
                f"lists {len(stores)} stores: each store would issue its own tokens, and tokens "
                "from two stores for one resource interleave (a destination's watermark would "
                "refuse honest calls and could take a stale one); set fencing.url to the "
                "PostgreSQL database that issues them for every store"
            )
        return None
    own = database_key(authority)
    shared = [name for name, url in stores.items() if database_key(url) == own]
    if shared:
        return (
            f"fencing.url: names the same database as {' and '.join(shared)}; the fencing "
            "authority is a database of its own"
        )
    return None


def _same(
    stores: Mapping[str, tuple[str, str]], key: Callable[[str, str], tuple[str, ...]]
) -> list[str]:
    """The labels of the stores that share a ``key``, "a and b" for each group of two or more."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for label, (url, namespace) in stores.items():
        groups.setdefault(key(url, namespace), []).append(label)
    return [" and ".join(labels) for labels in groups.values() if len(labels) > 1]


def label_problem(label: str) -> str | None:
    """Why ``label`` cannot name a store, or None."""
    if re.match(STORE_LABEL, label):
        return None
    return (
        f"{label!r} is not a store label: a lower-case letter, then at most 31 lower-case "
        "letters, digits, '_' or '-'"
    )

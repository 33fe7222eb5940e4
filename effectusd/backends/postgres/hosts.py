"""The connection string psycopg is handed, built from the parameters the database URL was
parsed into when it was read (effectusd/core/conninfo.py), never by parsing the URL again.

Several hosts in one database URL (``postgresql://u@h1:5432,h2:5432/db`` or
``host=h1,h2 port=5432,5432 …``): libpq tries them in order and takes the first that answers.
After a failover the first to answer may be the old primary, come back as a standby; so unless
the URL says otherwise, a URL naming several hosts asks for the one that takes writes
(``target_session_attrs=read-write``)."""

from __future__ import annotations

from psycopg import ProgrammingError
from psycopg.conninfo import make_conninfo

from effectusd.core.database_url import DatabaseURLError, PostgresDatabase

READ_WRITE = "read-write"
UNKNOWN_PARAMETER = (
    "PostgreSQL database URL: libpq knows no parameter of one of its names (a query "
    "parameter after ?, or a keyword before =)"
)


def primary_conninfo(database: PostgresDatabase) -> str:
    """The keyword/value string of ``database``'s parameters, with
    ``target_session_attrs=read-write`` when it names several hosts and no
    target_session_attrs. DatabaseURLError, quoting nothing, for a parameter libpq does not
    know (psycopg's message would quote the string)."""
    params = dict(database.params)
    hosts = params.get("host") or params.get("hostaddr") or ""
    if "," in hosts and "target_session_attrs" not in params:
        params["target_session_attrs"] = READ_WRITE
    try:
        return make_conninfo("", **params)
    except ProgrammingError:
        raise DatabaseURLError(UNKNOWN_PARAMETER) from None

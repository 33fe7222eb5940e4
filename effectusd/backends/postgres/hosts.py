"""Several hosts in one database URL (``postgresql://u@h1:5432,h2:5432/db`` or
``host=h1,h2 port=5432,5432 …``): libpq tries them in order and takes the first that answers.
After a failover the first to answer may be the old primary, come back as a standby; so unless
the URL says otherwise, a URL naming several hosts asks for the one that takes writes
(``target_session_attrs=read-write``)."""

from __future__ import annotations

from psycopg.conninfo import conninfo_to_dict, make_conninfo

READ_WRITE = "read-write"


def primary_conninfo(conninfo: str) -> str:
    """``conninfo`` as given, or with ``target_session_attrs=read-write`` when it names
    several hosts and no target_session_attrs."""
    params = conninfo_to_dict(conninfo)
    hosts = str(params.get("host") or params.get("hostaddr") or "")
    if "," not in hosts or "target_session_attrs" in params:
        return conninfo
    return make_conninfo(conninfo, target_session_attrs=READ_WRITE)

"""A PostgreSQL connection string read the way libpq reads it, once, where it is read (the
config file, ``--database-url``, ``EFFECTUSD_DATABASE_URL``): the URI form
(``postgresql://user:password@host1:port1,host2/dbname?key=value``, percent-encoded) and the
keyword/value form (``host=h dbname=d password='a b'``). The result is what
``psycopg.conninfo.conninfo_to_dict`` gives for the same string; which keywords exist is
libpq's to say (the backend asks it once, when it builds the connection string it uses).

A string that cannot be parsed raises ConninfoError with a fixed text: never the string, nor a
part of it, since a password may be anywhere in it. Pure: no driver, no I/O.
"""

from __future__ import annotations

URI_PREFIXES = ("postgresql://", "postgres://")  # as libpq: case-sensitive


class ConninfoError(ValueError):
    """A connection string libpq could not parse. The text is fixed: it quotes nothing."""


def is_uri(text: str) -> bool:
    return text.startswith(URI_PREFIXES)


def conninfo_params(text: str) -> dict[str, str]:
    """The parameters ``text`` sets, by libpq keyword (URI parts as ``user``, ``password``,
    ``host``, ``port``, ``dbname``); ConninfoError if it cannot be parsed."""
    return _uri_params(text) if is_uri(text) else _keyword_params(text)


# -- the URI form ----------------------------------------------------------------------------


def _uri_params(text: str) -> dict[str, str]:
    rest = text.split("://", 1)[1]
    params: dict[str, str] = {}
    at = _first_of(rest, "@/")
    if at < len(rest) and rest[at] == "@":
        user, colon, password = rest[:at].partition(":")
        if user:
            params["user"] = _decoded(user)
        if colon and password:
            params["password"] = _decoded(password)
        rest = rest[at + 1 :]
    hosts, ports, rest = _netloc(rest)
    if hosts:
        params["host"] = _decoded(hosts)
    if ports:
        params["port"] = _decoded(ports)
    if rest.startswith("/"):
        dbname, _, query = rest[1:].partition("?")
        if dbname:
            params["dbname"] = _decoded(dbname)
        rest = "?" + query if "?" in rest else ""
    if rest.startswith("?"):
        params.update(_query_params(rest[1:]))
    return params


def _netloc(rest: str) -> tuple[str, str, str]:
    """The comma-separated hosts and ports at the start of ``rest``, and what follows them
    (from its ``/`` or ``?``)."""
    hosts: list[str] = []
    ports: list[str] = []
    while True:
        if rest.startswith("["):
            close = rest.find("]")
            if close < 0:
                raise ConninfoError("an IPv6 host opened with [ has no closing ]")
            if close == 1:
                raise ConninfoError("an IPv6 host between [ and ] is empty")
            host, rest = rest[1:close], rest[close + 1 :]
            if rest and rest[0] not in ":/?,":
                raise ConninfoError("an IPv6 host's ] is followed by neither :, /, ? nor ,")
        else:
            end = _first_of(rest, ":/?,")
            host, rest = rest[:end], rest[end:]
        port = ""
        if rest.startswith(":"):
            end = _first_of(rest, "/?,", 1)
            port, rest = rest[1:end], rest[end:]
        hosts.append(host)
        ports.append(port)
        if not rest.startswith(","):
            return ",".join(hosts), ",".join(ports), rest
        rest = rest[1:]


def _query_params(query: str) -> dict[str, str]:
    params: dict[str, str] = {}
    for pair in query.split("&") if query else []:
        key, equals, value = pair.partition("=")
        if not equals:
            raise ConninfoError("a query parameter has no = (write key=value)")
        if "=" in value:
            raise ConninfoError("a query parameter has a second = (percent-encode it as %3D)")
        key, value = _decoded(key), _decoded(value)
        if key == "ssl" and value == "true":  # libpq's JDBC compatibility
            key, value = "sslmode", "require"
        params[key] = value
    return params


def _decoded(part: str) -> str:
    """``part`` with its %XX escapes decoded (as UTF-8 text, as libpq passes the bytes on)."""
    if "%" not in part:
        return part
    out = bytearray()
    index = 0
    while index < len(part):
        char = part[index]
        if char != "%":
            out += char.encode()
            index += 1
            continue
        digits = part[index + 1 : index + 3]
        if len(digits) != 2 or not all(d in "0123456789abcdefABCDEF" for d in digits):
            raise ConninfoError(
                "a % is not followed by two hexadecimal digits: percent-encode a % in the "
                "user name or password as %25 (and @ : / ? # [ ] as %40 %3A %2F %3F %23 %5B %5D)"
            )
        if digits == "00":
            raise ConninfoError("%00 (a NUL byte) cannot be part of a connection parameter")
        out.append(int(digits, 16))
        index += 3
    try:
        return out.decode()
    except UnicodeDecodeError:
        raise ConninfoError("a percent-encoded value is not UTF-8 text") from None


def _first_of(text: str, chars: str, start: int = 0) -> int:
    """The index of the first of ``chars`` in ``text`` from ``start``, else its length."""
    return next((i for i in range(start, len(text)) if text[i] in chars), len(text))


# -- the keyword/value form ------------------------------------------------------------------


def _keyword_params(text: str) -> dict[str, str]:
    params: dict[str, str] = {}
    index = 0
    while index < len(text):
        if text[index].isspace():
            index += 1
            continue
        end = _first_of(text, "=", index)
        keyword = text[index:end]
        if end == len(text) or any(c.isspace() for c in keyword.rstrip()):
            raise ConninfoError(
                "a keyword is not followed by = (a value holding a space must be quoted: "
                "password='a b', with \\' and \\\\ for a quote and a backslash)"
            )
        index = end + 1
        while index < len(text) and text[index].isspace():
            index += 1
        value, index = _keyword_value(text, index)
        params[keyword.rstrip()] = value
    return params


def _keyword_value(text: str, index: int) -> tuple[str, int]:
    """The value starting at ``index`` (quoted or bare, with backslash escapes), and the index
    after it."""
    quoted = index < len(text) and text[index] == "'"
    index += quoted
    out: list[str] = []
    while index < len(text):
        char = text[index]
        if char == "\\":
            out.append(text[index + 1 : index + 2])
            index += 2
        elif (char == "'") if quoted else char.isspace():  # the value's end
            return "".join(out), index + 1
        else:
            out.append(char)
            index += 1
    if quoted:
        raise ConninfoError("a quoted value has no closing quote")
    return "".join(out), index

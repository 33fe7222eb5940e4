"""Canonical JSON (RFC 8785 / JCS) with the limits of docs/design.md section 3, reported by path.

We validate before handing a value to ``rfc8785`` so that every problem is reported at once
and names where it is (``steps[1].args.amount: integer outside ±(2^53-1)``), instead of the
first exception the serializer happens to raise.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Sequence
from itertools import accumulate
from typing import Any

import rfc8785

JsonValue = Any
"""A value made of dict (str keys), list, str, int, float, bool and None."""

MAX_SAFE_INTEGER = 2**53 - 1

# Limits on what effectusd accepts (docs/design.md section 3), far below what any JSON loader or
# index chokes on: a value past them is refused at check/submit (or fails its step when it
# is only built at enqueue), never stored for a daemon to trip over.
MAX_JSON_DEPTH = 64
"""Arrays and objects nested in one another, the document's own root being level 1."""
MAX_PLAN_BYTES = 1_048_576
"""The canonical JSON of a whole plan."""
MAX_FACTS_BYTES = 1_048_576
"""The canonical JSON of one saga's facts object."""
MAX_FENCING_RESOURCE_CHARS = 256
"""One rendered fencing resource (it is an index key in the fencing tables)."""
MAX_PATH_CHARS = 2048
"""One rendered request path, after percent-encoding."""
_PATH_SHOWN = 120  # a too-deep path is cut here: 64 levels of long keys would drown the reason
# JCS writes integral doubles below 1e21 as plain digits; past 2^53-1 those digits would read
# back as an integer we refuse, so such doubles are refused up front (no silent round-trip loss).
_PLAIN_DIGITS_LIMIT = 1e21
# JSON allows U+0000 in text; PostgreSQL's jsonb and text do not, so no store takes it.
NUL_REASON = "%s contains U+0000 (NUL), which PostgreSQL cannot store"


class CanonicalJSONError(ValueError):
    """A value that cannot be canonical JSON. ``problems`` holds every ``path: reason``."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


def join_path(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if key.isidentifier():
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key, ensure_ascii=True)}]"


def json_problems(
    value: object, path: str = "$", max_depth: int = MAX_JSON_DEPTH, *, storable: bool = True
) -> list[str]:
    """Every reason ``value`` is not canonical JSON, each prefixed with where it is; with
    ``storable`` (the default: what is to be written), U+0000 in a string or key too.

    Containers nested past ``max_depth`` are reported, not entered: the walk's own recursion
    is bounded by the limit, so even a 100,000-level value cannot exhaust the stack.
    """
    problems: list[str] = []
    _walk(value, path, problems, max_depth, storable)
    return problems


def nesting_reason(max_depth: int = MAX_JSON_DEPTH) -> str:
    return f"nests deeper than {max_depth} levels of arrays and objects"


def nesting_exceeded(problems: Sequence[str]) -> bool:
    """Whether ``problems`` (from json_problems) include a too-deep value."""
    return any(problem.endswith(nesting_reason()) for problem in problems)


def size_problem(data: bytes, limit: int, what: str) -> str | None:
    if len(data) <= limit:
        return None
    return f"{what}: {len(data)} bytes of canonical JSON, over the limit of {limit}"


def _walk(value: object, path: str, problems: list[str], depth_left: int, storable: bool) -> None:
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            problems.append(f"{path}: integer outside ±(2^53-1)")
        return
    if isinstance(value, float):
        if math.isnan(value):
            problems.append(f"{path}: NaN is not JSON")
        elif math.isinf(value):
            problems.append(f"{path}: Infinity is not JSON")
        elif value.is_integer() and MAX_SAFE_INTEGER < abs(value) < _PLAIN_DIGITS_LIMIT:
            problems.append(f"{path}: number outside ±(2^53-1) written as an integer")
        return
    if isinstance(value, str):
        if not _is_valid_unicode(value):
            problems.append(f"{path}: string contains a lone surrogate")
        if storable and "\x00" in value:
            problems.append(f"{path}: {NUL_REASON % 'string'}")
        return
    if isinstance(value, dict | list | tuple) and depth_left <= 0:
        shown = path if len(path) <= _PATH_SHOWN else path[: _PATH_SHOWN - 1] + "…"
        problems.append(f"{shown}: {nesting_reason()}")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                problems.append(f"{path}: object key of type {type(key).__name__} is not a string")
                continue
            if not _is_valid_unicode(key):
                problems.append(f"{path}: object key contains a lone surrogate")
                continue
            if storable and "\x00" in key:
                problems.append(f"{path}: {NUL_REASON % 'object key'}")
                continue
            _walk(item, join_path(path, key), problems, depth_left - 1, storable)
        return
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _walk(item, join_path(path, index), problems, depth_left - 1, storable)
        return
    problems.append(f"{path}: {type(value).__name__} is not a JSON type")


# The format characters (Unicode category Cf, to Unicode 15.1) but the two joiners: invisible,
# and the bidirectional marks, embeddings, overrides and isolates among them reorder what is
# shown around them. The zero-width non-joiner and joiner (U+200C, U+200D) reorder nothing and
# are part of ordinary text (a Persian word, an emoji sequence), so they stay as they are;
# an actor's name refuses them too (operator_decisions.name_problem).
FORMAT_CHARACTERS = (
    "\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b\u200e\u200f"
    "\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001"
    "\U000e0020-\U000e007f"
)
# What a terminal, a log reader or a browser would not show as itself, beyond the C0 controls:
# DEL and the C1 controls (an escape sequence rewrites the screen), the line and paragraph
# separators, and the format characters.
HIDDEN_CHARACTERS = "\x7f-\x9f\u2028\u2029" + FORMAT_CHARACTERS
# Characters that are not storable text (NUL), not encodable (surrogates), or not shown as
# themselves: the C0 controls (a newline starts a line of its own) and the hidden ones.
_UNPRINTABLE = re.compile(f"[\x00-\x1f{HIDDEN_CHARACTERS}\ud800-\udfff]")


def escape_unprintable(text: str) -> str:
    """``text`` with every unprintable character written as its ``\\uXXXX`` escape, so that
    stored text printed to a terminal is one line that shows what it holds."""
    return _UNPRINTABLE.sub(escape_match, text)


def escape_match(match: re.Match[str]) -> str:
    """The character ``match`` found, as JSON writes it escaped: ``\\uXXXX``, or the pair of
    them of its UTF-16 surrogates beyond the Basic Multilingual Plane (so that JSON text
    escaped so parses to the same value)."""
    code = ord(match.group())
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def printable_lines(lines: Iterable[str]) -> str:
    """Lines for a terminal, joined: each stays one line whatever a stored value in it holds,
    so none can pass for another entry."""
    return "\n".join(escape_unprintable(line) for line in lines)


def printable(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, every unstorable or unprintable one escaped: what
    may go into evidence, an error column or a log line whatever a destination sent."""
    return escape_unprintable(text[:limit]) + ("…" if len(text) > limit else "")


def unprintable_problem(text: str) -> str | None:
    """Why ``text`` may not be written where people read it (a timeline, a log, a terminal):
    the first unprintable character, by code point and position; None when there is none."""
    found = _UNPRINTABLE.search(text)
    if found is None:
        return None
    return (
        f"holds U+{ord(found.group()):04X}, a control or formatting character (character "
        f"{found.start() + 1}): give one line of printable text"
    )


def _is_valid_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def canonical_bytes(value: object, path: str = "$") -> bytes:
    """The RFC 8785 bytes of ``value``; raises CanonicalJSONError listing every problem.

    A value of the plainest kind is written by the standard library's C encoder, whose
    output is the same bytes for it (``_plain``), in a fifth of ``rfc8785``'s time; any other
    value is checked path by path and written by ``rfc8785``."""
    if _plain(value, MAX_JSON_DEPTH):
        try:
            return _PLAIN.encode(value).encode("utf-8")
        except UnicodeEncodeError:
            pass  # a lone surrogate: reported below, where it is
    problems = json_problems(value, path, storable=False)  # JSON allows U+0000
    if problems:
        raise CanonicalJSONError(problems)
    return rfc8785.dumps(value)  # type: ignore[arg-type]


# For a ``_plain`` value these are RFC 8785's bytes: members sorted by key (ASCII keys sort
# the same by code point as by UTF-16 code unit), no whitespace, text as is but for the
# escapes both write (quote, backslash, the C0 controls, \b \t \n \f \r short, the rest
# \u00xx in lowercase), integers of at most 2^53-1 in plain digits as a double prints them.
_PLAIN = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _plain(value: object, depth_left: int) -> bool:
    """``value`` holds only None, booleans, safe integers, text, lists and objects with ASCII
    keys (exactly those types, no subclass), nested no deeper than ``json_problems`` allows.
    False means "not sure", never "invalid": such a value takes the checked path."""
    kind = type(value)
    if kind is str or value is None or kind is bool:
        return True
    if kind is int:
        return -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER  # type: ignore[operator]
    if depth_left <= 0:
        return False
    if kind is dict:
        return all(
            type(key) is str and key.isascii() and _plain(item, depth_left - 1)
            for key, item in value.items()  # type: ignore[attr-defined]
        )
    if kind is list:
        return all(_plain(item, depth_left - 1) for item in value)  # type: ignore[attr-defined]
    return False  # floats (RFC 8785 writes them as ECMAScript does), tuples, anything else


def canonical_text(value: object, path: str = "$") -> str:
    return canonical_bytes(value, path).decode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical_hash(value: object, path: str = "$") -> str:
    """Hex SHA-256 of the canonical bytes."""
    return sha256_hex(canonical_bytes(value, path))


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate object key {key!r}")
        result[key] = value
    return result


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_A_BRACKET = re.compile(r"[^\[\]{}]+")
_BRACKET_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def text_nesting(text: str | bytes) -> int:
    """How deeply the arrays and objects of a JSON text nest, found without parsing it (the
    parser itself recurses, and a deep enough text exhausts the stack)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")  # brackets and quotes are ASCII
    brackets = _NOT_A_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(accumulate(_BRACKET_STEP[char] for char in brackets), default=0)


# One decoder for every parse: json.loads with hooks builds a new one per call (most of the
# cost of parsing a small answer). A decoder keeps no state between calls.
_STRICT_DECODER = json.JSONDecoder(
    parse_constant=_reject_constant, object_pairs_hook=_no_duplicate_keys
)


def parse_json(text: str | bytes, max_depth: int | None = None) -> JsonValue:
    """Strict JSON parsing: no NaN/Infinity, no duplicate keys. Raises ValueError with position.

    With ``max_depth``, a text nesting deeper is refused before it is parsed. Without it, a
    text too deep for the parser is still a ValueError, never a RecursionError.
    """
    if max_depth is not None and text_nesting(text) > max_depth:
        raise ValueError(f"JSON {nesting_reason(max_depth)}")
    try:
        if isinstance(text, str):
            if text.startswith("\ufeff"):  # as json.loads refuses it
                raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        else:  # bytes: decoded as json.loads decodes them (UTF-8, -16 or -32, by detection)
            text = text.decode(json.detect_encoding(text), "surrogatepass")
        return _STRICT_DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"malformed JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from exc
    except RecursionError:
        raise ValueError("JSON nests too deeply to parse") from None

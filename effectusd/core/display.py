"""How a saga's evidence is shown to a person, by the CLI's text and the console's pages alike:
each stored value on one line, bounded and escaped; a dispatch's arguments checked against the
hash its key was made from; the destination's own reason; a probe's answer.

Pure: it reads the view's values (docs/schema/saga.json) and writes text. The whole of a long
value is in ``sagas show --json`` (and ``GET /api/sagas/SAGA_ID``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from effectusd.core.canonical import (
    HIDDEN_CHARACTERS,
    CanonicalJSONError,
    canonical_text,
    escape_match,
    escape_unprintable,
)
from effectusd.core.identity import argument_hash

VALUE_CHARS = 200  # of one value shown on a line; the whole is in the JSON view
WHOLE = "the whole: sagas show --json"
PROBE_ANSWERS = ("probe_answered", "probe_given_up")  # the timeline entries a probe's answer makes

# What escape_unprintable (and JSON text written with ensure_ascii off) leaves raw but a
# terminal or a browser may act on or draw out of order or not at all: the hidden characters
# (DEL, the C1 controls, the line and paragraph separators, the format characters).
_HIDDEN = re.compile(f"[{HIDDEN_CHARACTERS}]")


def escape_hidden(text: str) -> str:
    """``text`` with each such character written as its ``\\uXXXX`` escape: in JSON text (they
    occur only inside strings there) the parsed values stay the same; on a terminal or a page
    each shows as what it is."""
    return _HIDDEN.sub(escape_match, text)


def json_document(data: Any, indent: int | None = None) -> str:
    """``data`` as JSON text for a person's screen, the CLI's --json and the console's /api
    alike: characters as they are but the hidden ones escaped (``escape_hidden``); typed
    views as their model's JSON form, anything else not JSON as its text."""
    text = json.dumps(data, indent=indent, ensure_ascii=False, default=_json_default)
    return escape_hidden(text)


def _json_default(value: object) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return str(value)


def escaped(text: str) -> str:
    """Stored text as one line that shows what it holds: every control, bidi and separator
    character escaped."""
    return escape_hidden(escape_unprintable(text))


def bounded(text: str, limit: int = VALUE_CHARS) -> str:
    """``text`` escaped and cut at ``limit`` characters, saying how long it is when cut."""
    if len(text) <= limit:
        return escaped(text)
    return f"{escaped(text[:limit])}… ({len(text):,} characters; {WHOLE})"


def value_text(value: Any) -> str:
    """A JSON value as its canonical text (how arguments are stored and hashed)."""
    try:
        return canonical_text(value)
    except CanonicalJSONError:  # a value no canonical form has: still shown, not hidden
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def shown(value: Any, limit: int = VALUE_CHARS) -> str:
    """A stored JSON value on one line, bounded and escaped."""
    return bounded(value_text(value), limit)


def args_check(args_canonical: str | None, args_hash: str | None) -> str:
    """What the stored bytes of a dispatch's arguments say against its stored argument hash:
    ``sha256 ok``, or the mismatch, loudly (the key and the destination's dedupe were made
    from the hash, so those bytes are not what the key stands for)."""
    if args_canonical is None:
        return "not stored"
    actual = argument_hash(args_canonical.encode("utf-8"))
    if actual == args_hash:
        return "sha256 ok"
    return (
        f"SHA-256 MISMATCH: the stored bytes hash to {actual}, the dispatch's argument hash "
        f"is {args_hash}; these are not the arguments its key was made for"
    )


def args_hash_ok(args_canonical: str | None, args_hash: str | None) -> bool:
    return args_canonical is not None and args_check(args_canonical, args_hash) == "sha256 ok"


def destination_reason(error: str | None, evidence: Mapping[str, Any] | None) -> str | None:
    """The reason the destination gave in a refusal's body, when the attempt's error does
    not end with it already (escaped; None when it gave none)."""
    reason = (evidence or {}).get("reason")
    if not isinstance(reason, str) or not reason:
        return None
    if error is not None and error.endswith(reason):
        return None
    return bounded(reason)


def probe_answer(kind: str, detail: Mapping[str, Any], evidence: str | None) -> str | None:
    """One probe's answer from its timeline entry: which probe, the status, the verdict, why,
    and the destination's own reason; None for any other entry."""
    if kind not in PROBE_ANSWERS:
        return None
    count = detail.get("probe")
    of = detail.get("max_probes")
    which = f"probe {count}/{of}" if count is not None and of is not None else "probe"
    status = detail.get("status")
    words = [
        which,
        f"http {status if status is not None else '-'}",
        str(detail.get("verdict") or kind),
    ]
    line = "  ".join(words) + (f": {bounded(evidence)}" if evidence else "")
    answer = detail.get("evidence")
    said = destination_reason(None, answer if isinstance(answer, Mapping) else None)
    if said is not None:
        line += f"  (destination's reason: {said})"
    guard = detail.get("guard")
    if isinstance(guard, str):
        line += f"  [{bounded(guard)}]"
    return line


def probe_answers(timeline: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], list[str]]:
    """Each dispatch's probe answers, keyed by effect id and direction, in timeline order,
    from the timeline's entries in their JSON form (``TimelineEvent``)."""
    found: dict[tuple[str, str], list[str]] = {}
    for event in timeline:
        line = probe_answer(event["kind"], event.get("detail") or {}, event.get("evidence"))
        where = (event.get("effect_id"), event.get("direction"))
        if line is not None and where[0] is not None and where[1] is not None:
            found.setdefault((str(where[0]), str(where[1])), []).append(
                f"{line}  at {event.get('at')}"
            )
    return found

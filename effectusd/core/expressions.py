"""Argument expressions: `{"$fact": …}`, `{"$result": …, "path": …}`, `{"$literal": …}`.

Expressions may stand anywhere inside a step's arguments; an object that is not one of the
three forms is an ordinary object whose members may contain expressions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from effectusd.core.canonical import JsonValue, join_path

_MARKERS = ("$fact", "$result", "$literal")
_ARRAY_INDEX = re.compile(r"0|[1-9][0-9]*")  # RFC 6901: ASCII digits, no leading zero


class ResolutionError(ValueError):
    pass


@dataclass(frozen=True)
class FactRef:
    name: str
    where: str


@dataclass(frozen=True)
class ResultRef:
    step: str
    pointer: str
    where: str


Reference = FactRef | ResultRef


def scan(value: JsonValue, where: str) -> tuple[list[Reference], list[str]]:
    """Every reference in ``value`` and every malformed expression, each with its path."""
    refs: list[Reference] = []
    problems: list[str] = []
    _scan(value, where, refs, problems)
    return refs, problems


def _scan(value: JsonValue, where: str, refs: list[Reference], problems: list[str]) -> None:
    if isinstance(value, list):
        for index, item in enumerate(value):
            _scan(item, join_path(where, index), refs, problems)
        return
    if not isinstance(value, Mapping):
        return
    markers = [key for key in value if key in _MARKERS]
    if not markers:
        for key, item in value.items():
            _scan(item, join_path(where, str(key)), refs, problems)
        return
    if len(markers) > 1:
        problems.append(f"{where}: an expression has exactly one of {', '.join(_MARKERS)}")
        return
    marker = markers[0]
    extra = sorted(set(value) - {marker, "path"} if marker == "$result" else set(value) - {marker})
    if extra:
        problems.append(f"{where}: unexpected key(s) {', '.join(extra)} in a {marker} expression")
        return
    if marker == "$literal":
        return
    target = value[marker]
    if not isinstance(target, str) or not target:
        problems.append(f"{where}: {marker} must name a {marker[1:]} as a non-empty string")
        return
    if marker == "$fact":
        refs.append(FactRef(target, where))
        return
    pointer = value.get("path", "")
    if not isinstance(pointer, str) or (pointer and not pointer.startswith("/")):
        problems.append(f"{where}: path must be a JSON Pointer starting with '/' (or empty)")
        return
    refs.append(ResultRef(target, pointer, where))


def resolve(
    value: JsonValue,
    facts: Mapping[str, JsonValue],
    results: Mapping[str, JsonValue],
    *,
    results_pending: bool = False,
) -> JsonValue:
    """Substitute every expression; raises ResolutionError naming what is missing.

    ``results_pending`` (at submit, before any step ran): a missing result stands as null.
    """
    if isinstance(value, list):
        return [resolve(item, facts, results, results_pending=results_pending) for item in value]
    if not isinstance(value, Mapping):
        return value
    if "$literal" in value:
        return value["$literal"]
    if "$fact" in value:
        name = value["$fact"]
        if name not in facts:
            raise ResolutionError(f"fact {name!r} has no value")
        return facts[name]
    if "$result" in value:
        step = value["$result"]
        if step not in results:
            if results_pending:
                return None
            raise ResolutionError(f"step {step!r} has no result")
        return json_pointer(results[step], value.get("path", ""))
    return {
        key: resolve(item, facts, results, results_pending=results_pending)
        for key, item in value.items()
    }


def substitute_facts(value: JsonValue, facts: Mapping[str, JsonValue]) -> JsonValue:
    """``value`` with each fact in place as a $literal, $result expressions left as they are
    (what a submit knows of a step that has not run)."""
    if isinstance(value, list):
        return [substitute_facts(item, facts) for item in value]
    if not isinstance(value, Mapping) or "$literal" in value or "$result" in value:
        return value
    if "$fact" in value:
        name = value["$fact"]
        if name not in facts:
            raise ResolutionError(f"fact {name!r} has no value")
        return {"$literal": facts[name]}
    return {key: substitute_facts(item, facts) for key, item in value.items()}


def needs_result(value: JsonValue) -> bool:
    """Whether ``value`` holds a $result expression (its resolution waits for a step)."""
    return any(isinstance(ref, ResultRef) for ref in scan(value, "")[0])


def json_pointer(document: JsonValue, pointer: str) -> JsonValue:
    """RFC 6901 lookup; raises ResolutionError naming the pointer."""
    if pointer == "":
        return document
    if not pointer.startswith("/"):
        raise ResolutionError(f"JSON Pointer {pointer!r} must start with '/'")
    current = document
    for raw in pointer.split("/")[1:]:
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(current, Mapping) and token in current:
            current = current[token]
        elif (
            isinstance(current, list)
            and _ARRAY_INDEX.fullmatch(token)
            and int(token) < len(current)
        ):
            current = current[int(token)]
        else:
            raise ResolutionError(f"JSON Pointer {pointer!r} does not match the result")
    return current


def is_literal(value: JsonValue) -> bool:
    refs, problems = scan(value, "$")
    return not refs and not problems

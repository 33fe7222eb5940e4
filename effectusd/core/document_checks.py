"""Checks of JSON values as documents: canonical JSON within its limits, facts against their
declared types, arguments against a verb's JSON Schema (naming paths, never values)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import jsonschema

from effectusd.core.canonical import (
    MAX_FACTS_BYTES,
    JsonValue,
    canonical_bytes,
    join_path,
    json_problems,
    nesting_exceeded,
    size_problem,
)
from effectusd.core.check_issues import CheckIssue, issues_from
from effectusd.core.expressions import resolve, scan
from effectusd.core.plan import FactType


def document_issues(
    value: object, path: str, limit: int | None = None, what: str = ""
) -> list[CheckIssue]:
    """Why ``value`` cannot be accepted as one JSON document: not canonical JSON, nested too
    deeply, or over ``limit`` bytes."""
    problems = json_problems(value, path)
    if not problems and limit is not None:
        too_big = size_problem(canonical_bytes(value, path), limit, what)
        problems = [] if too_big is None else [too_big]
    return issues_from(problems)


def fact_issues(
    declared: Mapping[str, FactType], facts: Mapping[str, JsonValue]
) -> list[CheckIssue]:
    """Facts supplied at submit must match the declared names and JSON types exactly."""
    issues = document_issues(dict(facts), "facts", MAX_FACTS_BYTES, "facts")
    if nesting_exceeded([str(issue) for issue in issues]):
        return issues
    for name, kind in declared.items():
        if name not in facts:
            issues.append(
                CheckIssue(join_path("facts", name), f"declared {kind.value} fact is missing")
            )
        elif not kind.accepts(facts[name]):
            issues.append(
                CheckIssue(
                    join_path("facts", name),
                    f"expected {kind.value}, got {type(facts[name]).__name__}",
                )
            )
    for name in facts:
        if name not in declared:
            issues.append(CheckIssue(join_path("facts", name), "fact is not declared by the plan"))
    return issues


def literal_schema_issues(
    args: dict[str, Any], schema: dict[str, Any], where: str
) -> list[CheckIssue]:
    """Schema violations visible before references are resolved: the whole object when it is
    all literal; otherwise each literal member, required names and unexpected names."""
    refs, _ = scan(args, where)
    if not refs:
        return schema_issues(resolve(args, {}, {}), schema, where)
    properties = schema.get("properties", {})
    issues = []
    for name, value in args.items():
        sub_refs, _ = scan(value, where)
        if not sub_refs and isinstance(properties.get(name), dict):
            issues.extend(
                schema_issues(resolve(value, {}, {}), properties[name], join_path(where, name))
            )
    for name in schema.get("required", []):
        if name not in args:
            issues.append(CheckIssue(where, f"schema: {name!r} is a required property"))
    if schema.get("additionalProperties") is False:
        for name in args:
            if name not in properties:
                issues.append(
                    CheckIssue(join_path(where, name), "schema: additional property not allowed")
                )
    return issues


def schema_issues(value: JsonValue, schema: dict[str, Any], where: str) -> list[CheckIssue]:
    validator = jsonschema.Draft202012Validator(schema)
    issues = []
    for error in sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path)):
        path = where
        for part in error.absolute_path:
            path = join_path(path, part)
        issues.append(CheckIssue(path, f"schema: {_schema_reason(error)}"))
    return issues


# jsonschema's messages for these quote only names: schema property names, or the names
# (never the values) of the instance's members.
_NAMING_KEYWORDS = frozenset(
    {"required", "dependentRequired", "additionalProperties", "unevaluatedProperties"}
)
_SHOWN_SCHEMA_CHARS = 80


def _schema_reason(error: jsonschema.ValidationError) -> str:
    """What the schema asked for, told from the schema alone: jsonschema's own messages quote
    the instance, and the instance is an argument value (possibly a secret)."""
    keyword = str(error.validator)
    expected = error.validator_value
    if keyword in _NAMING_KEYWORDS:
        return error.message
    if keyword == "type":
        kinds = expected if isinstance(expected, list) else [expected]
        return f"must be of type {' or '.join(str(kind) for kind in kinds)}"
    if isinstance(expected, dict) or (
        isinstance(expected, list) and any(isinstance(item, dict | list) for item in expected)
    ):
        return f"fails {keyword}"  # a subschema: the path already says where
    shown = json.dumps(expected, ensure_ascii=False)
    if len(shown) > _SHOWN_SCHEMA_CHARS:
        shown = shown[: _SHOWN_SCHEMA_CHARS - 1] + "…"
    return f"fails {keyword} {shown}"

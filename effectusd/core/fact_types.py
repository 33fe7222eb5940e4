"""A plan's declared fact types from Python types or a pydantic model of the facts.

Each Python type maps to the JSON type ``FactType.accepts`` checks at submit, so a fact that
type-checks in the caller's code is also accepted by the plan. What has no single JSON type
(a union, ``Optional``: every declared fact must be given, never null) is refused by name.
"""

from __future__ import annotations

import enum
import types
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeAlias, Union, get_args, get_origin

from pydantic import BaseModel

from effectusd.core.canonical import join_path
from effectusd.core.check_issues import CheckIssue, PlanCheckError
from effectusd.core.plan import FactType

# A fact's declared type: a FactType, or a Python type or typing form such as list[str].
FactsInput: TypeAlias = Mapping[str, Any] | type[BaseModel]

_SUPPORTED = (
    "use str, int, float, bool, a dict or Mapping, a list, tuple or Sequence, "
    "a pydantic model, a Literal of one of those scalars, or a FactType"
)


def fact_types(facts: FactsInput | None) -> dict[str, FactType]:
    """The plan's ``facts`` section; a PlanCheckError names every fact whose type has no JSON
    type, each at its ``facts.NAME`` path, as the checker names plan problems."""
    if facts is None:
        return {}
    if isinstance(facts, type) and issubclass(facts, BaseModel):
        # model_dump() keys facts by field name, so the plan declares them by field name.
        annotations: Mapping[str, Any] = {
            name: field.annotation for name, field in facts.model_fields.items()
        }
    elif isinstance(facts, Mapping):
        annotations = facts
    else:
        raise TypeError(
            f"facts must be a mapping of names to types or a pydantic model class, "
            f"not {type(facts).__name__}"
        )
    declared: dict[str, FactType] = {}
    issues: list[CheckIssue] = []
    for name, annotation in annotations.items():
        kind = fact_type(annotation)
        if kind is None:
            issues.append(
                CheckIssue(join_path("facts", str(name)), f"{_shown(annotation)}: {_SUPPORTED}")
            )
        else:
            declared[name] = kind
    if issues:
        raise PlanCheckError(issues)
    return declared


def fact_type(annotation: Any) -> FactType | None:
    """The JSON type a value of ``annotation`` always has, or None when it has no single one."""
    if isinstance(annotation, FactType):
        return annotation
    origin = get_origin(annotation)
    if origin is Literal:
        kinds = {fact_type(type(value)) for value in get_args(annotation)}
        return kinds.pop() if len(kinds) == 1 else None
    if origin in {Union, types.UnionType}:
        return None
    cls = origin if origin is not None else annotation
    if not isinstance(cls, type):
        return None
    return _class_type(cls)


def _class_type(cls: type) -> FactType | None:
    # bool before int (a bool is an int to Python, not to JSON); subclasses such as a StrEnum
    # count as their base, as FactType.accepts counts their values.
    if issubclass(cls, bool):
        return FactType.BOOLEAN
    if issubclass(cls, enum.Enum) and not issubclass(cls, str | int | float):
        return None
    for base, kind in ((str, FactType.STRING), (int, FactType.INTEGER), (float, FactType.NUMBER)):
        if issubclass(cls, base):
            return kind
    if issubclass(cls, BaseModel | Mapping):
        return FactType.OBJECT
    if issubclass(cls, Sequence) and not issubclass(cls, bytes | bytearray):
        return FactType.ARRAY
    return None


def _shown(annotation: Any) -> str:
    if get_origin(annotation) in {Union, types.UnionType}:
        return (
            f"{annotation!r} has no plan fact type: a union has no single JSON type, and a "
            "declared fact is always given (never null)"
        )
    if isinstance(annotation, type) and get_origin(annotation) is None:
        return f"type {annotation.__qualname__} has no plan fact type"
    return f"{annotation!r} has no plan fact type"

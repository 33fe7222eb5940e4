"""Plans in Python: a small typed builder whose plan *is* the JSON form (docs/design.md
section 4), checked by the same check() and giving the same digest.

    checkout = Plan(
        "checkout",
        facts={"order": str, "amount": int},
        steps=[
            step("reserve", "inventory.reserve", args={"order": fact("order")},
                 compensate=compensate("inventory.release", args={
                     "reservation_id": result("reserve", "/reservation_id")})),
            step("ship", "shipping.schedule", args={"order": fact("order")},
                 compensate=no_compensation),
        ],
    )

A Plan reads as its JSON form (a read-only Mapping), so everything that takes a JSON plan
takes it: check(), Client.submit, Submission. The builder decides nothing about validity:
whatever it is given goes into the JSON form, and check() reports every problem by path.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from effectusd.core.canonical import MAX_JSON_DEPTH, JsonValue
from effectusd.core.checker import check
from effectusd.core.contracts import VerbContract
from effectusd.core.fact_types import FactsInput, fact_types
from effectusd.core.plan import NO_COMPENSATION, CheckedPlan, FactType
from effectusd.core.registry import Registry

# How deep the builder copies: past MAX_JSON_DEPTH check() reports the nesting without walking
# further, so a deeper value is left as it is rather than walked into a RecursionError.
_COPY_DEPTH = MAX_JSON_DEPTH + 1


@dataclass(frozen=True)
class FactArg:
    """The value of a declared fact, given at submit: ``{"$fact": name}``."""

    name: str

    def to_json(self) -> dict[str, JsonValue]:
        return {"$fact": self.name}


@dataclass(frozen=True)
class ResultArg:
    """A value from an earlier step's result (or, in a compensation, its own step's):
    ``{"$result": step, "path": pointer}``; an empty pointer is the whole result."""

    step: str
    path: str = ""

    def to_json(self) -> dict[str, JsonValue]:
        # The path is left out when empty, as resolve() reads a missing one: the shorter of
        # the two JSON spellings, so a JSON plan written without it has the same digest.
        if not self.path:
            return {"$result": self.step}
        return {"$result": self.step, "path": self.path}


@dataclass(frozen=True)
class LiteralArg:
    """A JSON value passed as it is, even an object that looks like a reference:
    ``{"$literal": value}``. Plain values need no wrapping; they are literals already."""

    value: JsonValue

    def to_json(self) -> dict[str, JsonValue]:
        return {"$literal": self.value}


Reference: TypeAlias = FactArg | ResultArg | LiteralArg
# An argument: plain JSON (a mapping with a "$fact", "$result" or "$literal" key reads as the
# JSON form reads it), a reference, or dicts and lists holding references anywhere.
Arg: TypeAlias = (
    bool
    | int
    | float
    | str
    | Reference
    | Mapping[str, "Arg"]
    | list["Arg"]
    | tuple["Arg", ...]
    | None
)
Args: TypeAlias = Mapping[str, Arg]


def fact(name: str) -> FactArg:
    return FactArg(name)


def result(step: str, path: str = "") -> ResultArg:
    return ResultArg(step, path)


def literal(value: JsonValue) -> LiteralArg:
    return LiteralArg(value)


@dataclass(frozen=True)
class Compensation:
    """What undoes a step: a verb and its arguments."""

    verb: str
    args: Args = field(default_factory=dict)


class NoCompensation(enum.Enum):
    """The explicit "nothing needs undoing": a plan never leaves compensation out by accident."""

    NO_COMPENSATION = NO_COMPENSATION


no_compensation = NoCompensation.NO_COMPENSATION


def compensate(verb: str, args: Args | None = None) -> Compensation:
    return Compensation(verb, args or {})


@dataclass(frozen=True)
class Step:
    id: str
    verb: str
    args: Args
    compensate: Compensation | NoCompensation
    # The steps this one runs after; None: after the step before it (no "after" in the JSON).
    after: tuple[str, ...] | str | None = None


def step(
    id: str,
    verb: str,
    args: Args | None = None,
    *,
    compensate: Compensation | NoCompensation,
    after: Iterable[str] | None = None,
) -> Step:
    """One step: call ``verb`` with ``args``; ``compensate`` is required, as in the JSON form
    (``compensate(verb, args)`` or ``no_compensation``). ``after`` names the steps it runs
    after, as ``"after"`` does in the JSON form (``[]``: at once); left out, the step runs
    after the one before it and the JSON form has no ``"after"``, so the digest is the same.
    A single string is not split into letters: check() reports it, as it would in JSON."""
    return Step(
        id,
        verb,
        args or {},
        compensate,
        after if after is None or isinstance(after, str) else tuple(after),
    )


class Plan(Mapping[str, JsonValue]):
    """A plan built in Python. Immutable: its JSON form is copied when it is built, so later
    changes to the dicts it was given do not reach it, and every read returns a fresh copy
    (down to the nesting limit: anything deeper makes check() refuse the plan anyway)."""

    __slots__ = ("_document", "_facts", "_steps")

    def __init__(
        self, plan_id: str, *, facts: FactsInput | None = None, steps: Iterable[Step]
    ) -> None:
        self._facts = fact_types(facts)
        self._steps = tuple(steps)
        self._document: dict[str, JsonValue] = {
            "plan_id": plan_id,
            "facts": {name: kind.value for name, kind in self._facts.items()},
            "steps": [_step_json(each) for each in self._steps],
        }

    @property
    def plan_id(self) -> str:
        plan_id: str = self._document["plan_id"]
        return plan_id

    @property
    def facts(self) -> dict[str, FactType]:
        return dict(self._facts)

    @property
    def steps(self) -> tuple[Step, ...]:
        return self._steps

    def to_json(self) -> dict[str, JsonValue]:
        """The plan's JSON form, as examples/checkout.json writes one (a fresh copy)."""
        return {key: _copy(value) for key, value in self._document.items()}

    def check(self, registry: Registry | Mapping[str, VerbContract]) -> CheckedPlan:
        """check() of the JSON form: a CheckedPlan, or a PlanCheckError listing every issue."""
        verbs = registry.verbs if isinstance(registry, Registry) else registry
        return check(self.to_json(), verbs)

    def __getitem__(self, key: str) -> JsonValue:
        return _copy(self._document[key])

    def __iter__(self) -> Iterator[str]:
        return iter(self._document)

    def __len__(self) -> int:
        return len(self._document)

    def __repr__(self) -> str:
        return f"Plan({self.plan_id!r}, steps={[each.id for each in self._steps]!r})"


def _step_json(each: Step) -> dict[str, JsonValue]:
    compensation: JsonValue
    if isinstance(each.compensate, Compensation):
        compensation = {"verb": each.compensate.verb, "args": _encode(each.compensate.args)}
    elif isinstance(each.compensate, NoCompensation):
        compensation = NO_COMPENSATION
    else:
        compensation = each.compensate  # not the builder's: check() reports it by path
    document: dict[str, JsonValue] = {
        "id": each.id,
        "verb": each.verb,
        "args": _encode(each.args),
        "compensate": compensation,
    }
    if each.after is not None:
        document["after"] = each.after if isinstance(each.after, str) else list(each.after)
    return document


def _encode(value: Any, depth_left: int = _COPY_DEPTH) -> JsonValue:
    """References as their JSON form, anywhere inside mappings, lists and tuples, in new
    containers. Anything else stays as it is: a value that is not JSON is check()'s to report,
    with its path."""
    if isinstance(value, FactArg | ResultArg):
        return value.to_json()
    if isinstance(value, LiteralArg):
        return {"$literal": _copy(value.value, depth_left - 1)}
    if depth_left <= 0:
        return value
    if isinstance(value, Mapping):
        return {key: _encode(item, depth_left - 1) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_encode(item, depth_left - 1) for item in value]
    return value


def _copy(value: JsonValue, depth_left: int = _COPY_DEPTH) -> JsonValue:
    """A copy of a JSON value's objects and arrays, as far down as check() reads them."""
    if depth_left <= 0:
        return value
    if isinstance(value, dict):
        return {key: _copy(item, depth_left - 1) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_copy(item, depth_left - 1) for item in value]
    return value

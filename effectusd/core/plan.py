"""Plans as written (PlanSpec) and as checked and pinned (CheckedPlan)."""

from __future__ import annotations

from enum import StrEnum
from functools import cached_property
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from effectusd.core.canonical import JsonValue, canonical_hash
from effectusd.core.derived import DerivedOnce
from effectusd.core.graph import PlanGraph

CHECKED_PLAN_FORMAT: Literal["effectusd/checked-plan/v1"] = "effectusd/checked-plan/v1"
NO_COMPENSATION = "none"


class FactType(StrEnum):
    STRING = "string"
    INTEGER = "integer"
    NUMBER = "number"
    BOOLEAN = "boolean"
    OBJECT = "object"
    ARRAY = "array"

    def accepts(self, value: JsonValue) -> bool:
        if self is FactType.STRING:
            return isinstance(value, str)
        if self is FactType.INTEGER:
            return isinstance(value, int) and not isinstance(value, bool)
        if self is FactType.NUMBER:
            return isinstance(value, int | float) and not isinstance(value, bool)
        if self is FactType.BOOLEAN:
            return isinstance(value, bool)
        if self is FactType.OBJECT:
            return isinstance(value, dict)
        return isinstance(value, list)


class CompensationSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    verb: str
    args: dict[str, Any] = Field(default_factory=dict)


class StepSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    verb: str
    args: dict[str, Any] = Field(default_factory=dict)
    compensate: CompensationSpec | Literal["none"]
    # The steps this one runs after (docs/design.md section 4); None: after the previous step.
    after: list[str] | None = None


class PlanSpec(BaseModel):
    """A plan as a user writes it (JSON file or Python object)."""

    model_config = ConfigDict(extra="forbid")
    plan_id: str
    facts: dict[str, FactType] = Field(default_factory=dict)
    steps: list[StepSpec] = Field(min_length=1)


class CheckedCompensation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    verb: str
    contract_hash: str
    args: dict[str, Any]


class CheckedStep(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    sequence: int
    verb: str
    contract_hash: str
    args: dict[str, Any]
    compensate: CheckedCompensation | None
    after: tuple[str, ...] | None = None

    @model_serializer(mode="wrap")
    def _omit_implicit_after(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A step without `after` must serialise as it did before `after` existed: the checked
        # plan's canonical JSON, and so every existing plan's digest, stays byte-identical.
        data: dict[str, Any] = handler(self)
        if self.after is None:
            data.pop("after", None)
        return data


class CheckedPlan(DerivedOnce):
    """A plan that passed check(): contract hashes inlined, digest over all of it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    _DERIVED: ClassVar[tuple[str, ...]] = ("is_sequential", "_steps_by_id", "graph", "has_inverse")
    format: Literal["effectusd/checked-plan/v1"] = CHECKED_PLAN_FORMAT
    plan_id: str
    facts: dict[str, FactType]
    steps: tuple[CheckedStep, ...]
    plan_digest: str

    def body(self) -> dict[str, JsonValue]:
        """The digested content: everything but the digest itself."""
        return self.model_dump(mode="json", exclude={"plan_digest"})

    def computed_digest(self) -> str:
        return canonical_hash(self.body())

    def document(self) -> dict[str, JsonValue]:
        return self.model_dump(mode="json")

    # The plan is frozen: what follows is worked out once per plan object, not per settlement
    # (the recorder asks both of every completion; DerivedOnce).
    @cached_property
    def is_sequential(self) -> bool:
        """No step declares `after`: each runs after the previous one, as before issue 17."""
        return all(step.after is None for step in self.steps)

    @cached_property
    def _steps_by_id(self) -> dict[str, CheckedStep]:
        return {step.id: step for step in reversed(self.steps)}  # the first of an id wins

    def step(self, effect_id: str) -> CheckedStep:
        return self._steps_by_id[effect_id]

    @cached_property
    def graph(self) -> PlanGraph:
        """The steps' dependency graph; a sequential plan's is a chain."""
        return PlanGraph.of(self.steps)

    @cached_property
    def has_inverse(self) -> dict[str, bool]:
        """Step id -> whether the step has a compensation."""
        return {step.id: step.compensate is not None for step in self.steps}

"""``@frozen`` makes the same records as ``@dataclass(frozen=True)``, with a faster __init__;
``by_value`` gives the same members as calling the enum."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from dataclasses import dataclass, field
from typing import ClassVar

import pytest

from effectusd.core import states
from effectusd.core.frozen import frozen
from effectusd.core.states import by_value


@frozen
class Record:
    name: str
    count: int
    tags: list[str] = field(default_factory=list)
    note: str | None = None
    flag: bool = field(default=False, kw_only=True)


@dataclass(frozen=True)
class Reference:
    name: str
    count: int
    tags: list[str] = field(default_factory=list)
    note: str | None = None
    flag: bool = field(default=False, kw_only=True)


@frozen
class Point:
    x: int
    y: int


@frozen
class Checked:
    low: int
    high: int
    seen: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.low > self.high:
            raise ValueError("low above high")
        self.seen.append("post_init")


def _fast(cls: type) -> bool:
    """Made by @frozen's own __init__ (not the dataclass's)."""
    return cls.__init__.__code__.co_filename == f"<frozen {cls.__qualname__}>"  # type: ignore[misc]


def test_a_frozen_record_is_built_by_its_own_init_with_the_dataclass_signature() -> None:
    assert _fast(Record) and _fast(Checked)
    made = Record("a", 1, note="n", flag=True)
    assert dataclasses.astuple(made) == dataclasses.astuple(Reference("a", 1, note="n", flag=True))
    assert vars(made) == vars(Reference("a", 1, note="n", flag=True))
    parameters = inspect.signature(Record).parameters.values()
    assert [(p.name, p.kind) for p in parameters] == [
        (p.name, p.kind) for p in inspect.signature(Reference).parameters.values()
    ]
    with pytest.raises(TypeError):
        Record("a", 1, [], None, True)  # type: ignore[misc]  # flag is keyword-only
    with pytest.raises(TypeError):
        Record("a")  # type: ignore[call-arg]


def test_a_frozen_record_keeps_every_property_of_a_frozen_dataclass() -> None:
    made = Record("a", 1)
    assert made == Record("a", 1)
    assert made != Record("a", 2)
    assert repr(made) == "Record(name='a', count=1, tags=[], note=None, flag=False)"
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.count = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del made.name  # type: ignore[misc]
    assert dataclasses.replace(made, count=3).count == 3
    assert copy.deepcopy(made) == made
    assert pickle.loads(pickle.dumps(made)) == made
    assert hash(Point(1, 2)) == hash(Point(1, 2)) == hash((1, 2))
    assert {Point(1, 2), Point(1, 2)} == {Point(1, 2)}


def test_each_record_gets_its_own_default_from_the_factory() -> None:
    first, second = Record("a", 1), Record("b", 2)
    first.tags.append("x")
    assert second.tags == []
    given = ["y"]
    assert Record("c", 3, given).tags is given


def test_post_init_runs_and_may_refuse() -> None:
    assert Checked(1, 2).seen == ["post_init"]
    with pytest.raises(ValueError, match="low above high"):
        Checked(3, 2)


def test_classes_it_cannot_speed_up_keep_the_dataclass_init() -> None:
    @dataclass(frozen=True, slots=True)
    class Slotted:
        name: str

    @frozen
    class Inherits(Slotted):  # a slot of the base would hide a value written to the dict
        count: int = 0

    @frozen
    class WithClassVar:
        kind: ClassVar[str] = "k"
        name: str

    @frozen
    class NotInit:
        name: str
        derived: str = field(default="", init=False)

    made = Inherits("a", 2)
    assert (made.name, made.count) == ("a", 2)
    assert WithClassVar("a").name == "a"
    assert NotInit("a").derived == ""
    for cls in (Inherits, WithClassVar, NotInit):
        assert not _fast(cls)


@pytest.mark.parametrize(
    "enum",
    [
        states.SagaState,
        states.StepState,
        states.DispatchState,
        states.Direction,
        states.Delivery,
        states.OutcomeClass,
        states.FencingStatus,
        states.SettledBy,
    ],
)
def test_by_value_gives_the_member_the_enum_call_gives(enum: type[states.StrEnum]) -> None:
    members = by_value(enum)
    assert len(members) == len(enum)
    for member in enum:
        assert members[member.value] is enum(member.value)
    with pytest.raises(KeyError):
        members["no such state"]

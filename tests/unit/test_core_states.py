"""The states' values are the stored strings, read as a plain attribute (core/states.py)."""

from __future__ import annotations

import pickle

import pytest

from effectusd.core import states
from effectusd.core.states import State, by_value

ENUMS = [
    value
    for value in vars(states).values()
    if isinstance(value, type) and issubclass(value, State) and value is not State
]


@pytest.mark.parametrize("enum", ENUMS, ids=lambda enum: enum.__name__)
def test_a_state_value_is_its_stored_text_and_reads_back_as_the_member(enum: type[State]) -> None:
    assert len(ENUMS) >= 10  # every enum the engine stores or matches on
    for member in enum:
        assert type(member.value) is str
        assert member.value == str(member) == member
        assert enum(member.value) is member is by_value(enum)[member.value]
        assert pickle.loads(pickle.dumps(member)) is member

"""Store operations: how every backend drives one (drive, drive_async), and outside a
transaction, where one_statement lets a single statement through."""

from __future__ import annotations

import asyncio
from collections.abc import Generator

import pytest

from effectusd.backends.operation import (
    Operation,
    Query,
    Rows,
    drive,
    drive_async,
    one_statement,
)


def statements(n: int) -> Operation[int]:
    total = 0
    for i in range(n):
        rows: Rows = yield (f"q{i}", {})
        total += len(rows)
    return total


def names_and_result(operation: Operation[int]) -> tuple[list[str], int]:
    names = []
    try:
        name, _ = next(operation)
        while True:
            names.append(name)
            name, _ = operation.send([{"x": 1}])
    except StopIteration as stop:
        return names, stop.value


def test_one_statement_passes_its_rows_and_result_through() -> None:
    assert names_and_result(one_statement(statements(1))) == (["q0"], 1)


def test_a_second_statement_is_refused_before_it_runs() -> None:
    with pytest.raises(RuntimeError, match="q1 after q0: more than one statement"):
        names_and_result(one_statement(statements(2)))


def test_drive_answers_each_step_in_turn_and_returns_what_the_operation_returns() -> None:
    asked: list[str] = []

    def perform(query: Query) -> Rows:
        asked.append(query[0])
        return [{"x": 1}] * len(asked)  # 1 row for q0, 2 for q1, 3 for q2

    assert drive(statements(3), perform) == 6
    assert asked == ["q0", "q1", "q2"]


def _steps_answered_with_none() -> Generator[str, None, tuple[str, dict[str, int]]]:
    """Steps whose answer is None (the kit's writes), returning what looks like a step."""
    assert (yield "first") is None
    assert (yield "second") is None
    return ("q9", {})


def test_drive_goes_on_after_a_none_answer_and_returns_a_step_shaped_result() -> None:
    asked: list[str] = []

    def perform(step: str) -> None:
        asked.append(step)

    assert drive(_steps_answered_with_none(), perform) == ("q9", {})
    assert asked == ["first", "second"]


def test_drive_async_awaits_each_answer_and_returns_the_same_as_drive() -> None:
    async def perform(query: Query) -> Rows:
        return [{"x": 1}, {"x": 2}]

    assert asyncio.run(drive_async(statements(2), perform)) == 4

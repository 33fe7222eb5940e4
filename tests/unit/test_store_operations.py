"""Store operations outside a transaction: one_statement lets exactly one statement through."""

from __future__ import annotations

import pytest

from effectusd.backends.operation import Operation, Rows, one_statement


def statements(n: int) -> Operation[int]:
    total = 0
    for i in range(n):
        rows: Rows = yield (f"q{i}", {})
        total += len(rows)
    return total


def drive(operation: Operation[int]) -> tuple[list[str], int]:
    names = []
    try:
        name, _ = next(operation)
        while True:
            names.append(name)
            name, _ = operation.send([{"x": 1}])
    except StopIteration as stop:
        return names, stop.value


def test_one_statement_passes_its_rows_and_result_through() -> None:
    assert drive(one_statement(statements(1))) == (["q0"], 1)


def test_a_second_statement_is_refused_before_it_runs() -> None:
    with pytest.raises(RuntimeError, match="q1 after q0: more than one statement"):
        drive(one_statement(statements(2)))

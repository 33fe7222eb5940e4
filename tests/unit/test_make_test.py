"""`make test` runs every test once: a parallel run (pytest-xdist) takes the tests not marked
serial, then a serial run takes those marked serial, over the same paths, and neither narrows
its selection otherwise. The checker is also run on broken recipes, so it is shown to fail."""

from __future__ import annotations

import itertools
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NARROWING = ("-k", "--deselect", "--ignore", "--ignore-glob", "-x", "--exitfirst", "--lf")


def pytest_runs(makefile: str, target: str = "test") -> list[list[str]]:
    """The pytest command lines of ``target``'s recipe, in order (continued lines joined)."""
    lines = makefile.replace("\\\n", " ").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    recipe = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        recipe.append(line)
    commands = " ".join(recipe).replace("&&", ";").split(";")
    return [shlex.split(c) for c in commands if "/pytest" in c]


def option(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def paths(args: list[str]) -> list[str]:
    """The positional arguments after the program (what the run collects)."""
    takes_value = {"-n", "-m", "-p", "--dist", "-k"}
    return [
        arg
        for previous, arg in itertools.pairwise(args)
        if not arg.startswith("-") and previous not in takes_value
    ]


def partition_problems(runs: list[list[str]]) -> list[str]:
    """What would let a test run twice, or not at all, or the serial ones run beside others."""
    if len(runs) != 2:
        return [f"expected a parallel then a serial pytest run, found {len(runs)}"]
    (parallel, serial), problems = runs, []
    if option(parallel, "-n") is None or option(parallel, "-m") != "not serial":
        problems.append(f"the first run is not -n N -m 'not serial': {parallel}")
    if option(serial, "-m") != "serial" or option(serial, "-n") not in (None, "0"):
        problems.append(f"the second run is not -m serial on one process: {serial}")
    if paths(parallel) != paths(serial) or not paths(parallel):
        problems.append(f"the runs collect different paths: {paths(parallel)}, {paths(serial)}")
    for run in runs:
        problems += [f"{flag} narrows {run}" for flag in NARROWING if flag in run]
    return problems


def test_make_test_runs_each_test_in_exactly_one_of_its_two_runs() -> None:
    runs = pytest_runs((ROOT / "Makefile").read_text())

    assert partition_problems(runs) == []
    assert paths(runs[0]) == ["tests"]


def test_the_checker_finds_a_test_run_twice_or_never() -> None:
    makefile = (
        "test: install\n"
        '\t$(BIN)/pytest -q -n 2 -m "not serial" tests/unit; parallel=$$?; \\\n'
        "\t$(BIN)/pytest -q -n 2 -m serial -k chaos tests && exit $$parallel\n"
        "\nlint: install\n\t$(BIN)/ruff check .\n"
    )

    problems = partition_problems(pytest_runs(makefile))

    assert len(problems) == 3, problems
    assert "not -m serial on one process" in problems[0]
    assert "different paths" in problems[1]
    assert problems[2].startswith("-k narrows")
    assert partition_problems([["pytest", "tests"]]) == [
        "expected a parallel then a serial pytest run, found 1"
    ]


def test_the_serial_marker_is_registered() -> None:
    assert '"serial: ' in (ROOT / "pyproject.toml").read_text()

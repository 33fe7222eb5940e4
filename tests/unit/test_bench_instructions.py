"""`make bench-instructions`: what it reads from callgrind's output and what it reports."""

from __future__ import annotations

import pytest

from effectusd.bench.instructions import callgrind_totals, main, per_step

DUMP = """# callgrind format
version: 1
creator: callgrind-3.19.0
pid: 1736
cmd:  python -m effectusd.bench.instructions --drain
part: 1

desc: Trigger: Client Request: dump

positions: line
events: Ir
summary: 4100946645

fn=(1) main
0 17
totals: 4100946645
"""


def test_the_count_is_the_totals_line_of_the_dump() -> None:
    assert callgrind_totals(DUMP) == 4_100_946_645
    assert callgrind_totals(DUMP.replace("totals: 4100946645", "")) == 4_100_946_645  # summary
    assert callgrind_totals(DUMP.replace("summary: 4100946645", "summary: 1")) == 4_100_946_645


def test_a_file_without_a_count_is_refused() -> None:
    with pytest.raises(ValueError, match="no totals or summary"):
        callgrind_totals("# callgrind format\nevents: Ir\n")


def test_instructions_per_step_are_the_difference_over_the_steps_it_adds() -> None:
    # 200 and 400 five-step sagas: the drain of 400 adds 1,000 steps
    assert per_step(2_228_270_768, 4_100_946_645, 1_000) == 1_872_676
    with pytest.raises(ValueError, match="no more instructions"):
        per_step(5, 5, 1_000)
    with pytest.raises(ValueError, match="must add steps"):
        per_step(1, 2, 0)


def test_the_command_refuses_an_empty_drain(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--sagas", "0"])
    assert exited.value.code == 2
    assert "--sagas and --steps must be at least 1" in capsys.readouterr().err

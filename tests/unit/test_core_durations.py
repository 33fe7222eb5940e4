"""Human durations used in config and on the CLI: a unit always, a bare number never."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from effectusd.core.contracts import RetryPolicy
from effectusd.core.durations import format_duration, parse_duration, to_milliseconds
from effectusd.core.probes import ProbeConfig

UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500ms", timedelta(milliseconds=500)),
        ("30s", timedelta(seconds=30)),
        ("1m", timedelta(minutes=1)),
        ("2h", timedelta(hours=2)),
        ("30d", timedelta(days=30)),
        ("1.5s", timedelta(milliseconds=1500)),
        (" 10 ms ", timedelta(milliseconds=10)),
        ("0s", timedelta(0)),
    ],
)
def test_durations_with_units_parse(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@given(st.integers(0, 36_500), st.sampled_from(sorted(UNIT_SECONDS)))
def test_every_unit_scales_whole_numbers(number: int, unit: str) -> None:
    expected = timedelta(seconds=number * UNIT_SECONDS[unit])
    assert abs(parse_duration(f"{number}{unit}") - expected) < timedelta(microseconds=1)


def test_minutes_are_not_mistaken_for_milliseconds() -> None:
    assert parse_duration("5m") == timedelta(minutes=5)
    assert parse_duration("5ms") == timedelta(milliseconds=5)


def test_timedeltas_pass_through() -> None:
    assert parse_duration(timedelta(hours=1)) == timedelta(hours=1)


@pytest.mark.parametrize(
    ("value", "number"),
    [
        (2000, "2000"),
        ("2000", "2000"),
        (" 2000 ", "2000"),
        (0, "0"),
        ("0", "0"),
        (0.5, "0.5"),
        ("1.5", "1.5"),
    ],
)
def test_a_bare_number_is_refused_showing_both_readings(value: object, number: str) -> None:
    with pytest.raises(ValueError) as excinfo:
        parse_duration(value)  # type: ignore[arg-type]
    assert str(excinfo.value) == (
        f'a duration needs a unit: write "{number}s" or "{number}ms" (ms, s, m, h, d)'
    )


@given(st.integers(0, 10**9))
def test_no_whole_number_is_a_duration_as_a_number_or_as_digits(number: int) -> None:
    for value in (number, str(number)):
        with pytest.raises(ValueError, match="a duration needs a unit"):
            parse_duration(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("model", "field"),
    [(RetryPolicy, "initial_backoff"), (RetryPolicy, "max_backoff"), (ProbeConfig, "every")],
)
@pytest.mark.parametrize("value", [30, 0.5, "30"])
def test_a_model_built_in_python_refuses_a_bare_number_naming_the_field(
    model: type[BaseModel], field: str, value: object
) -> None:
    fields: dict[str, object] = {"path": "/keys/{key}"} if model is ProbeConfig else {}
    with pytest.raises(ValidationError) as excinfo:
        model(**fields, **{field: value})
    (error,) = excinfo.value.errors()
    assert error["loc"] == (field,) and "a duration needs a unit" in error["msg"]
    assert model(**fields, **{field: timedelta(seconds=30)})  # a timedelta is taken as it is


@pytest.mark.parametrize("text", ["5x", "", "ms", "-1s", "1S", "1 sec", "s5"])
def test_malformed_duration_text_is_refused_naming_the_input(text: str) -> None:
    with pytest.raises(ValueError) as excinfo:
        parse_duration(text)
    assert repr(text) in str(excinfo.value)


@pytest.mark.parametrize("value", [-1, -0.5, True, False])
def test_negative_numbers_and_booleans_are_refused_naming_the_input(value: object) -> None:
    with pytest.raises(ValueError) as excinfo:
        parse_duration(value)  # type: ignore[arg-type]
    assert repr(value) in str(excinfo.value)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "9999999999999999d"])
def test_unrepresentable_durations_are_refused_with_value_error_naming_the_input(
    value: object,
) -> None:
    with pytest.raises(ValueError) as excinfo:
        parse_duration(value)  # type: ignore[arg-type]
    assert repr(value) in str(excinfo.value)


@pytest.mark.parametrize(
    ("text", "milliseconds"),
    [("500ms", 500), ("1.5s", 1500), ("2h", 7_200_000), ("1d", 86_400_000)],
)
def test_to_milliseconds_gives_whole_milliseconds(text: str, milliseconds: int) -> None:
    assert to_milliseconds(parse_duration(text)) == milliseconds


def test_a_duration_past_a_century_is_refused_naming_the_input() -> None:
    with pytest.raises(ValueError, match="36501d"):
        parse_duration("36501d")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (timedelta(hours=24), "24h"),
        (timedelta(days=3), "72h"),
        (timedelta(seconds=90), "90s"),
        (timedelta(minutes=5), "5m"),
        (timedelta(milliseconds=400), "400ms"),
        (timedelta(0), "0ms"),
    ],
)
def test_a_duration_is_written_in_the_largest_whole_unit_and_reads_back(
    value: timedelta, text: str
) -> None:
    assert format_duration(value) == text
    assert parse_duration(text) == value

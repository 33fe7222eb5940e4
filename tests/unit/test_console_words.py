"""The console's own wording: result placeholders drawn from the step, refusals without the
CLI's flags, and text no store keeps refused by field name."""

from __future__ import annotations

from typing import Any

import pytest

from effectusd.console.forms import result_placeholder
from effectusd.console.service import BadInput, console_words, storable


@pytest.mark.parametrize(
    ("schema", "placeholder"),
    [
        (None, "what s1 returned, as JSON (optional)"),
        ({"type": "object"}, "what s1 returned, as JSON (optional)"),
        (
            {"properties": {"charge": {"type": "string"}, "n": {"type": "integer"}}},
            '{"charge": "…", "n": 0} (optional)',
        ),
        (
            {"properties": {"ok": {"type": "boolean"}, "x": {}}},
            '{"ok": false, "x": "…"} (optional)',
        ),
    ],
)
def test_the_result_placeholder_follows_the_verbs_result_schema(
    schema: dict[str, Any] | None, placeholder: str
) -> None:
    assert result_placeholder("s1", schema) == placeholder


@pytest.mark.parametrize(
    ("cli", "console"),
    [
        ("--evidence must say what you checked", "evidence must say what you checked"),
        ("--result: malformed JSON", "result: malformed JSON"),
        ("--result goes with --committed", "result goes with decision committed"),
        ("saga x is running; use `effectusd retry`", "saga x is running; use Retry"),
    ],
)
def test_refusals_are_worded_for_the_console_not_the_cli(cli: str, console: str) -> None:
    assert console_words(cli) == console


@pytest.mark.parametrize("bad", ["a\x00b", "a\ud800", "\udfff"])
def test_text_no_store_keeps_is_refused_by_field_name_without_the_value(bad: str) -> None:
    with pytest.raises(BadInput) as refused:
        storable("evidence", bad)
    assert str(refused.value).startswith("evidence:") and bad not in str(refused.value)
    assert storable("evidence", "plain text ✓") == "plain text ✓"

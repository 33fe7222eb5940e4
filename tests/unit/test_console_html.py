"""The console's markup escapes every value: content, attributes and template fields."""

from __future__ import annotations

import json

import pytest

from effectusd.cli.app import emit
from effectusd.console.api import json_response
from effectusd.console.html import Html, esc, render, tag, void
from effectusd.console.pages import saga_rows
from effectusd.console.security import Principal, host_name, is_loopback

HOSTILE = "<script>alert('x')</script>\" onmouseover=\"x"


def test_content_attributes_and_template_fields_are_escaped() -> None:
    assert "<script>" not in tag("td", HOSTILE)
    assert tag("a", "x", href=HOSTILE).count('"') == 2  # the value cannot close the attribute
    assert 'value="&lt;script&gt;' in void("input", value=HOSTILE)
    page = render("login.html", message=HOSTILE)
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert render("login.html", message=Html("<b>kept</b>")).count("<b>kept</b>") == 1
    assert esc(esc(HOSTILE)) == esc(HOSTILE)  # escaped once, never twice


def test_a_saga_list_escapes_what_was_submitted() -> None:
    row = {
        "saga_id": "ab" * 32,
        "state": "running",
        "plan_id": HOSTILE,
        "execution_id": HOSTILE,
        "created_at": None,
        "updated_at": None,
        "stop_reason": HOSTILE,
    }
    assert "<script>" not in saga_rows([row])


def test_loopback_names_and_actors() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("evil.example")
    assert host_name("127.0.0.1:8089") == "127.0.0.1" and host_name("[::1]:80") == "::1"
    assert Principal("oncall", True).actor(" alice\n smith ") == "console:oncall/alice smith"
    assert Principal("loopback", False).actor() == "console:loopback"


def test_the_admin_api_escapes_hidden_characters_as_the_cli_json_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A stored value with bidi marks, an override and a C1 control: the API's JSON body and
    `--json` print each escaped, and both parse back to the same value."""
    data = {"evidence": "paid \u202egnp.exe\u200f \u061c\u200e ok\x85", "actor": "user:علي"}
    body = json_response(200, data).text
    emit(data, True, str)
    printed = capsys.readouterr().out
    assert body is not None
    for text in (body, printed):
        assert json.loads(text) == data
        for char in "\u202e\u200f\u061c\u200e\x85":
            assert char not in text
        assert "علي" in text  # letters stay as they are
    assert json.loads(body) == json.loads(printed)

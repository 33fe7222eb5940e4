"""The console's markup escapes every value: content, attributes and template fields."""

from __future__ import annotations

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

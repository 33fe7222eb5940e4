"""HTML with every value escaped: templates (package data, ``string.Template``) and the small
fragments the pages are built of. A value becomes markup only by going through ``esc`` or
by being built here as ``Html``; templates substitute plain strings escaped."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from html import escape
from importlib.resources import files
from string import Template
from typing import Any


class Html(str):
    """Markup already escaped: substituted as it is."""


def esc(value: Any) -> Html:
    if isinstance(value, Html):
        return value
    text = "" if value is None else value if isinstance(value, str) else str(value)
    return Html(escape(text, quote=True))


def join(parts: Iterable[Any]) -> Html:
    return Html("".join(esc(part) for part in parts))


def tag(element: str, content: Any = "", /, **attrs: Any) -> Html:
    """``<name attrs>content</name>``; attribute names use _ for - and a trailing _ for
    Python keywords (``class_``); an attribute of True is written bare, None left out."""
    rendered = []
    for key, value in attrs.items():
        attr = key.rstrip("_").replace("_", "-")
        if value is True:
            rendered.append(f" {attr}")
        elif value is not None and value is not False:
            rendered.append(f' {attr}="{esc(value)}"')
    return Html(f"<{element}{''.join(rendered)}>{esc(content)}</{element}>")


def void(element: str, /, **attrs: Any) -> Html:
    return Html(tag(element, **attrs).removesuffix(f"</{element}>"))


@cache
def _template(name: str) -> Template:
    return Template((files("effectusd.console") / "templates" / name).read_text("utf-8"))


def render(name: str, **values: Any) -> Html:
    return Html(_template(name).substitute({k: esc(v) for k, v in values.items()}))


def page(title: str, body: Any, who: str = "") -> bytes:
    return render("layout.html", title=title, body=esc(body), who=who).encode("utf-8")


def table(headings: Sequence[str], rows: Iterable[Sequence[Any]]) -> Html:
    head = tag("tr", join(tag("th", h) for h in headings))
    body = join(tag("tr", join(tag("td", cell) for cell in row)) for row in rows)
    return tag("table", join([head, body]))


def state(value: str | None) -> Html:
    css = "blocked" if (value or "").startswith("blocked_") else ""
    if value in ("completed", "compensated"):
        css = "done"
    return tag("span", value or "-", class_=f"state {css}".strip())


def options(values: Sequence[str], selected: str | None, blank: str | None = "") -> Html:
    choices = ([blank] if blank is not None else []) + list(values)
    return join(
        tag("option", value or "any", value=value, selected=value == (selected or ""))
        for value in choices
    )


def hidden(fields: Mapping[str, Any]) -> Html:
    return join(void("input", type="hidden", name=k, value=v) for k, v in fields.items())

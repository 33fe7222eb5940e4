"""`{args.x}` / `{facts.x}` templates, used by verb paths and fencing resources; a fencing
resource may also name `{store}`, kept as written until the fencing authority of several stores
puts the store's label in its place (docs/design.md section 8)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import quote

from effectusd.core.canonical import JsonValue

_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_NAME = re.compile(r"(args|facts)\.([A-Za-z_][A-Za-z0-9_]*)")
STORE = "store"  # the scope of the one placeholder without a name: {store}
STORE_PLACEHOLDER = "{store}"


class TemplateError(ValueError):
    pass


@dataclass(frozen=True)
class Placeholder:
    scope: str  # "args" or "facts"
    name: str


@dataclass(frozen=True)
class Template:
    source: str
    parts: tuple[str | Placeholder, ...]

    @property
    def placeholders(self) -> tuple[Placeholder, ...]:
        return tuple(part for part in self.parts if isinstance(part, Placeholder))

    def render(
        self,
        args: Mapping[str, JsonValue],
        facts: Mapping[str, JsonValue],
        encode: Callable[[str], str] = lambda value: value,
    ) -> str:
        out: list[str] = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            source = args if part.scope == "args" else facts
            if part.name not in source:
                raise TemplateError(
                    f"template {self.source!r}: {part.scope}.{part.name} is not present"
                )
            value = source[part.name]
            if isinstance(value, bool) or not isinstance(value, str | int):
                raise TemplateError(
                    f"template {self.source!r}: {part.scope}.{part.name} must be a string "
                    f"or an integer, got {type(value).__name__}"
                )
            try:
                out.append(encode(str(value)))
            except TemplateError as exc:
                raise TemplateError(
                    f"template {self.source!r}: {part.scope}.{part.name}: {exc}"
                ) from None
        return "".join(out)

    def render_within(
        self,
        limit: int,
        what: str,
        args: Mapping[str, JsonValue],
        facts: Mapping[str, JsonValue],
        encode: Callable[[str], str] = lambda value: value,
    ) -> str:
        """``render``, refusing a result longer than ``limit`` characters (named by its
        length, never shown: it is made of argument and fact values)."""
        rendered = self.render(args, facts, encode)
        if len(rendered) > limit:
            raise TemplateError(too_long(self, what, len(rendered), limit))
        return rendered

    @property
    def literal_length(self) -> int:
        return sum(len(part) for part in self.parts if isinstance(part, str))


def too_long(template: Template, what: str, length: int, limit: int) -> str:
    return (
        f"template {template.source!r}: the rendered {what} would be {length} characters, "
        f"over the limit of {limit}"
    )


def parse_template(source: str, allowed_scopes: frozenset[str]) -> Template:
    parts: list[str | Placeholder] = []
    position = 0
    for match in _PLACEHOLDER.finditer(source):
        literal = source[position : match.start()]
        if "{" in literal or "}" in literal:
            raise TemplateError(f"template {source!r}: unbalanced brace")
        if literal:
            parts.append(literal)
        if match.group(1).strip() == STORE and STORE in allowed_scopes:
            parts.append(STORE_PLACEHOLDER)  # as written: the authority fills it at grant time
            position = match.end()
            continue
        name = _NAME.fullmatch(match.group(1).strip())
        if name is None or name.group(1) not in allowed_scopes:
            scopes = " or ".join(
                STORE_PLACEHOLDER if scope == STORE else f"{{{scope}.NAME}}"
                for scope in sorted(allowed_scopes)
            )
            raise TemplateError(
                f"template {source!r}: placeholder {{{match.group(1)}}} must be {scopes}"
            )
        parts.append(Placeholder(name.group(1), name.group(2)))
        position = match.end()
    tail = source[position:]
    if "{" in tail or "}" in tail:
        raise TemplateError(f"template {source!r}: unbalanced brace")
    if tail:
        parts.append(tail)
    return Template(source, tuple(parts))


def encode_path_segment(value: str) -> str:
    """Percent-encode one substituted path segment; `/`, `.` and `..` are refused outright."""
    if "/" in value or value in {".", ".."} or value == "":
        # The segment is an argument's value: say what is wrong with it, never what it is.
        raise TemplateError("not allowed as a path segment (empty, '/', '.' or '..')")
    return quote(value, safe="")


PATH_SCOPES = frozenset({"args"})
FENCING_SCOPES = frozenset({"args", "facts", STORE})


def without_store_placeholder(value: str) -> str:
    """A value put into a fencing resource may not hold ``{store}``: the authority would read
    it as the placeholder, and a resource meant to be global would become one per store."""
    if STORE_PLACEHOLDER in value:
        raise TemplateError(
            f"holds {STORE_PLACEHOLDER}, which names the store in a fencing resource"
        )
    return value

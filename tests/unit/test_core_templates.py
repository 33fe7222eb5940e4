"""Path and fencing templates: percent-encoding, refused segments, fencing resolution."""

from __future__ import annotations

import string
from typing import Any
from urllib.parse import unquote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from effectusd.core.contracts import VerbContract
from effectusd.core.templates import (
    FENCING_SCOPES,
    PATH_SCOPES,
    Placeholder,
    TemplateError,
    encode_path_segment,
    parse_template,
)

UNRESERVED = set(string.ascii_letters + string.digits + "-._~")


def _verb(**fields: Any) -> VerbContract:
    return VerbContract(name="v", destination="d", **fields)


# --- encoding one segment ------------------------------------------------------------------


@given(st.text(min_size=1).filter(lambda s: "/" not in s and s not in {".", ".."}))
def test_encoded_segment_uses_only_unreserved_characters_and_decodes_back(value: str) -> None:
    encoded = encode_path_segment(value)
    assert set(encoded) <= UNRESERVED | {"%"} | set(string.hexdigits)
    assert unquote(encoded, errors="strict") == value


@pytest.mark.parametrize("value", ["a b", "a?b", "a#b", "%2F", "é", "a;b=c", "\\", "a&b"])
def test_characters_with_meaning_in_a_url_are_percent_encoded(value: str) -> None:
    encoded = encode_path_segment(value)
    assert "%" in encoded
    assert unquote(encoded) == value


def test_an_already_encoded_slash_is_encoded_again_not_decoded() -> None:
    assert "/" not in unquote(encode_path_segment("%2F"))


@pytest.mark.parametrize("value", ["/", "a/b", "/leading", "trailing/", ".", "..", ""])
def test_slash_dot_dotdot_and_empty_segments_are_refused(value: str) -> None:
    with pytest.raises(TemplateError, match="not allowed as a path segment"):
        encode_path_segment(value)


def test_a_refused_segment_is_named_by_its_placeholder_never_by_its_value() -> None:
    template = parse_template("/cards/{args.card}", PATH_SCOPES)
    with pytest.raises(TemplateError) as excinfo:
        template.render({"card": "SECRET-4111/1111"}, {}, encode_path_segment)
    message = str(excinfo.value)
    assert "args.card" in message
    assert "SECRET" not in message


@pytest.mark.parametrize("value", ["...", ".a", "a..b"])
def test_dots_inside_a_longer_segment_are_allowed(value: str) -> None:
    assert unquote(encode_path_segment(value)) == value


# --- rendering a verb path ---------------------------------------------------------------------


def test_path_renders_every_placeholder_percent_encoded() -> None:
    verb = _verb(path="/accounts/{args.account}/items/{args.item}")
    assert verb.render_path({"account": "a b", "item": 42}) == "/accounts/a%20b/items/42"


def test_path_refuses_a_slash_in_an_argument_instead_of_adding_a_segment() -> None:
    verb = _verb(path="/accounts/{args.account}")
    with pytest.raises(TemplateError, match=r"args\.account: not allowed as a path segment"):
        verb.render_path({"account": "../admin"})


@pytest.mark.parametrize("value", ["..", ".", ""])
def test_path_refuses_dot_segments_and_empty_arguments(value: str) -> None:
    verb = _verb(path="/accounts/{args.account}/x")
    with pytest.raises(TemplateError):
        verb.render_path({"account": value})


@pytest.mark.parametrize(
    "value", [True, False, 1.5, 2.0, {"a": 1}, [1], None], ids=lambda v: type(v).__name__
)
def test_placeholder_values_other_than_string_or_integer_are_refused(value: Any) -> None:
    verb = _verb(path="/x/{args.account}", fencing=("acct:{args.account}",))
    with pytest.raises(TemplateError, match=r"args\.account must be a string or an integer"):
        verb.render_path({"account": value})
    with pytest.raises(TemplateError, match=r"args\.account must be a string or an integer"):
        verb.resolve_fencing({"account": value}, {})


def test_missing_argument_is_named() -> None:
    verb = _verb(path="/x/{args.account}")
    with pytest.raises(TemplateError, match=r"args\.account is not present"):
        verb.render_path({"other": "a"})


# --- parsing templates -------------------------------------------------------------------------


def test_template_parts_keep_literals_and_placeholders_in_order() -> None:
    template = parse_template("acct:{args.a}/{facts.b}!", FENCING_SCOPES)
    assert template.parts == (
        "acct:",
        Placeholder("args", "a"),
        "/",
        Placeholder("facts", "b"),
        "!",
    )


@pytest.mark.parametrize(
    "source",
    ["/x/{facts.order}", "/x/{other.a}", "/x/{args}", "/x/{}", "/x/{args.1a}", "/x/{args.a-b}"],
)
def test_path_placeholders_must_be_args_names(source: str) -> None:
    with pytest.raises(TemplateError, match="placeholder"):
        parse_template(source, PATH_SCOPES)


@pytest.mark.parametrize("source", ["/x/{args.a", "/x/args.a}", "/x/{{args.a}}", "}{"])
def test_unbalanced_braces_are_refused(source: str) -> None:
    with pytest.raises(TemplateError):
        parse_template(source, FENCING_SCOPES)


# --- fencing -----------------------------------------------------------------------------------


def test_fencing_resolves_args_and_facts_sorted_and_deduplicated() -> None:
    verb = _verb(fencing=("order:{facts.order}", "acct:{args.account}", "order:{args.order}"))
    resources = verb.resolve_fencing({"account": "a-9", "order": "o-1"}, {"order": "o-1"})
    assert resources == ["acct:a-9", "order:o-1"]


@given(st.lists(st.text(min_size=1, max_size=5), min_size=1, max_size=4))
def test_fencing_resources_are_the_sorted_set_of_rendered_templates(values: list[str]) -> None:
    fencing = tuple(f"r:{{args.a{index}}}" for index in range(len(values)))
    args = {f"a{index}": value for index, value in enumerate(values)}
    resources = _verb(fencing=fencing).resolve_fencing(args, {})
    assert resources == sorted({f"r:{value}" for value in values})


def test_fencing_missing_fact_is_named() -> None:
    verb = _verb(fencing=("order:{facts.order}",))
    with pytest.raises(TemplateError, match=r"facts\.order is not present"):
        verb.resolve_fencing({}, {})

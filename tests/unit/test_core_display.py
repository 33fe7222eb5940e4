"""How stored evidence is shown to a person (effectusd.core.display): bounded, escaped, the
arguments checked against their hash, the destination's reason said once."""

from __future__ import annotations

import json

from effectusd.core.canonical import canonical_text
from effectusd.core.display import (
    VALUE_CHARS,
    args_check,
    bounded,
    destination_reason,
    escape_hidden,
    probe_answer,
    shown,
)
from effectusd.core.identity import argument_hash

BIDI_AND_C1 = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c\x85\x9f"


def test_arguments_are_checked_against_their_hash_and_a_mismatch_is_said_loudly() -> None:
    args = canonical_text({"amount": 1250, "order": "o-1"})
    digest = argument_hash(args.encode("utf-8"))
    assert args_check(args, digest) == "sha256 ok"
    tampered = args_check(args.replace("1250", "1251"), digest)
    assert tampered.startswith("SHA-256 MISMATCH") and digest in tampered


def test_a_long_value_is_cut_saying_how_long_it_is_and_where_the_whole_is() -> None:
    value = "x" * (VALUE_CHARS * 3)
    text = shown(value)
    assert text.startswith('"' + "x" * (VALUE_CHARS - 1) + "…")
    assert f"({len(value) + 2:,} characters; the whole: sagas show --json)" in text
    assert shown({"a": 1}) == '{"a":1}'


def test_control_bidi_and_c1_characters_are_escaped_on_one_line() -> None:
    text = bounded(f"a\nb{BIDI_AND_C1}c")
    assert all(c not in text for c in "\n" + BIDI_AND_C1)
    assert "\\u000a" in text and "\\u202e" in text and "\\u061c" in text and "\\u0085" in text


def test_escaping_hidden_characters_in_json_text_keeps_the_parsed_value() -> None:
    value = {"note": f"x{BIDI_AND_C1}\\u202e", BIDI_AND_C1: [BIDI_AND_C1]}
    text = escape_hidden(json.dumps(value, ensure_ascii=False))
    assert json.loads(text) == value
    assert all(c not in text for c in BIDI_AND_C1)


def test_the_destinations_reason_is_shown_only_where_the_error_does_not_say_it() -> None:
    evidence = {"reason": "out of stock"}
    assert destination_reason("HTTP 409: out of stock", evidence) is None
    assert destination_reason("HTTP 409", evidence) == "out of stock"
    assert destination_reason(None, {"reason": "no\u202ekey"}) == "no\\u202ekey"
    assert destination_reason("HTTP 409", {}) is None


def test_a_probe_answer_gives_its_status_verdict_and_reasons() -> None:
    detail = {
        "probe": 2,
        "max_probes": 3,
        "verdict": "keep_blocked",
        "status": 403,
        "evidence": {"reason": "token expired"},
    }
    line = probe_answer("probe_answered", detail, "HTTP 403: neither")
    assert line == (
        "probe 2/3  http 403  keep_blocked: HTTP 403: neither  "
        "(destination's reason: token expired)"
    )
    assert probe_answer("probe_given_up", {}, None) == "probe  http -  probe_given_up"
    assert probe_answer("operator_resolve", detail, None) is None

"""Text people read later (the timeline, the log, a terminal) and text a store must hold: a
control character in an operator's actor or evidence is refused by the operator layer and the
command line, stored text is escaped when `sagas show` prints it, and U+0000 anywhere in a
plan, facts or arguments is refused by path before anything is written."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable, Generator
from datetime import UTC, datetime
from typing import Any

import pytest
from click.testing import CliRunner

from effectusd import operator
from effectusd.cli import main
from effectusd.cli.render import saga_detail
from effectusd.core.canonical import (
    escape_unprintable,
    json_problems,
    printable,
    unprintable_problem,
)
from effectusd.core.checker import PlanCheckError, check
from effectusd.core.operator_decisions import RefusalKind, Refused, Resolution
from effectusd.core.registry import Registry
from effectusd.core.submission import prepare_submission
from effectusd.core.views import SagaView, TimelineEvent
from effectusd.operator.report import ActionReport
from tests.unit.conftest import make_core_verbs

SAGA = "a" * 64
# What a newline in evidence made `sagas show` print: a line of its own, passing for an action.
FAKE_LINE = "  10:00:00.000  operator_resolve charge/forward #1 [console:oncall/bob]"
UNPRINTABLE = ["\n", "\r", "\t", "\x00", "\x1b[2J", "\x7f", "\x9b", "\u2028", "\u202e"]


# --- the pure check --------------------------------------------------------------------------


@pytest.mark.parametrize("char", UNPRINTABLE)
def test_unprintable_problem_names_the_code_point_and_its_position_not_the_text(
    char: str,
) -> None:
    problem = unprintable_problem(f"secret-{char}-x")

    assert problem is not None
    assert f"U+{ord(char[0]):04X}" in problem and "character 8" in problem
    assert "secret" not in problem


def test_printable_text_in_any_script_has_no_problem() -> None:
    assert unprintable_problem("checked the ledger: key 8574e6 · Zahlung über 12,50 € ✓") is None


def test_escape_unprintable_keeps_one_line_and_shows_each_character() -> None:
    escaped = escape_unprintable("a\nb\x1b[2Jc\u202ed")

    assert escaped == "a\\u000ab\\u001b[2Jc\\u202ed"
    assert printable("ab\ncd", 3) == "ab\\u000a…"


# --- the operator layer ----------------------------------------------------------------------

Build = Callable[[str, str | None], Generator[Any, Any, Any]]
OPERATIONS: dict[str, Build] = {
    "resolve": lambda actor, evidence: operator.resolve(
        SAGA,
        "charge",
        Resolution.COMMITTED,
        registry=Registry({}),
        actor=actor,
        evidence=evidence or "",
    ),
    "retry": lambda actor, evidence: operator.retry(
        SAGA, registry=Registry({}), actor=actor, evidence=evidence
    ),
    "cancel": lambda actor, evidence: operator.cancel(
        SAGA, registry=Registry({}), actor=actor, evidence=evidence
    ),
    "adopt_contract": lambda actor, evidence: operator.adopt_contract(
        SAGA, registry=Registry({}), actor=actor, evidence=evidence or ""
    ),
}


@pytest.mark.parametrize("name", sorted(OPERATIONS))
@pytest.mark.parametrize(
    ("actor", "evidence", "field"),
    [
        ("user:bob", f"looked at the ledger\n{FAKE_LINE}", "evidence"),
        ("user:bob\x1b[31m", "looked at the ledger", "actor"),
    ],
)
def test_operator_action_refuses_a_control_character_naming_the_field_before_any_read(
    name: str, actor: str, evidence: str, field: str
) -> None:
    operation = OPERATIONS[name](actor, evidence)

    # The first statement an operation yields is its lock of the saga: refused before it.
    with pytest.raises(Refused) as raised:
        next(operation)

    assert raised.value.kind is RefusalKind.INVALID  # the console answers 422, the CLI exit 3
    assert raised.value.message.startswith(f"{field} holds U+00")
    assert "ledger" not in raised.value.message and "bob" not in raised.value.message


def test_operator_action_with_printable_actor_and_evidence_goes_on_to_lock_the_saga() -> None:
    operation = OPERATIONS["cancel"]("console:oncall/bob", "customer asked, ticket 4711")

    statement = next(operation)

    assert statement[0] == "lock_sagas"


# --- the command line ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "option"),
    [
        (["cancel", SAGA, "--evidence", f"x\n{FAKE_LINE}"], "--evidence"),
        (["retry", SAGA, "--evidence", "ok", "--actor", "bob\rmallory"], "--actor"),
        (["resolve", SAGA, "charge", "--committed", "--evidence", "a\x1b[2Jb"], "--evidence"),
        (["adopt-contract", SAGA, "--evidence", "a\u2028b"], "--evidence"),
    ],
)
def test_cli_operator_option_with_a_control_character_exits_2_naming_the_option(
    command: list[str], option: str
) -> None:
    # An unreachable database: the option is refused before anything connects.
    url = "postgresql://postgres@127.0.0.1:1/none"
    result = CliRunner().invoke(
        main, ["--database-url", url, *command], env={"EFFECTUSD_CONFIG": None}
    )

    assert result.exit_code == 2, result.output
    assert f"'{option}'" in result.output and "U+" in result.output
    assert "mallory" not in result.output and "operator_resolve" not in result.output
    assert "Traceback" not in result.output


# --- sagas show ------------------------------------------------------------------------------


def _view(evidence: str, stop_reason: str) -> SagaView:
    at = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)
    event = TimelineEvent(
        event_id=1,
        at=at,
        kind="operator_cancel",
        effect_id=None,
        direction=None,
        attempt=None,
        from_state=None,
        to_state=None,
        actor="user:alice",
        evidence=evidence,
        detail={},
    )
    return SagaView(
        saga_id=SAGA,
        namespace="default",
        execution_id="order-7",
        plan_id="checkout",
        plan_digest="b" * 64,
        state="running",
        stop_reason=stop_reason,
        cancel_requested_at=None,
        cancel_requested_by=None,
        revision=1,
        created_at=at,
        updated_at=at,
        finished_at=None,
        facts={},
        steps=[],
        timeline=[event],
        next_actions=[],
    )


def test_sagas_show_prints_stored_control_characters_escaped_so_no_line_can_be_faked() -> None:
    # Written before actors and evidence were checked, or straight into the database.
    text = saga_detail(_view(f"asked by phone\n{FAKE_LINE}", "canceled\x1b[2J by alice"))
    lines = text.splitlines()

    assert FAKE_LINE not in lines
    timeline = lines[lines.index("timeline") + 1 :]
    assert len(timeline) == 1
    assert timeline[0].endswith(f"evidence: asked by phone\\u000a{FAKE_LINE}")
    assert "\x1b" not in text and "canceled\\u001b[2J by alice" in text


def test_an_operator_actions_summary_keeps_a_stored_reason_on_its_own_line() -> None:
    # A stop reason may quote what a destination answered.
    report = ActionReport(
        action="retry",
        saga_id=SAGA,
        actor="user:alice",
        evidence="fence holder is gone",
        saga_state={"from": "blocked_fence", "to": "running"},
        decision="send_again",
        detail={"reason": f"destination said: no\n{FAKE_LINE}"},
    )

    lines = report.summary().splitlines()

    assert FAKE_LINE not in lines and len(lines) == 4
    assert lines[2] == f"  reason    destination said: no\\u000a{FAKE_LINE}"


# --- U+0000 in what is submitted -------------------------------------------------------------


def test_json_problems_names_the_path_of_a_nul_in_a_string_and_in_a_key() -> None:
    problems = json_problems({"note": "a\x00b", "items": [{"k\x00": 1}]}, "facts")

    assert problems == [
        "facts.note: string contains U+0000 (NUL), which PostgreSQL cannot store",
        "facts.items[0]: object key contains U+0000 (NUL), which PostgreSQL cannot store",
    ]


def _plan(args: dict[str, Any]) -> dict[str, Any]:
    return {
        "plan_id": "checkout",
        "facts": {"order": "string", "amount": "integer"},
        "steps": [
            {"id": "charge", "verb": "charge", "args": args, "compensate": "none"},
        ],
    }


GOOD_ARGS = {"order": {"$fact": "order"}, "currency": "EUR", "amount": {"$fact": "amount"}}


def test_check_refuses_a_nul_in_a_literal_argument_by_path() -> None:
    with pytest.raises(PlanCheckError) as raised:
        check(_plan({**GOOD_ARGS, "currency": "EU\x00R"}), make_core_verbs())

    paths = [issue.path for issue in raised.value.issues]
    assert "steps[0].args.currency" in paths
    assert any("U+0000" in str(issue) for issue in raised.value.issues)


def test_submit_refuses_a_nul_in_a_fact_by_path_without_the_value() -> None:
    checked = check(_plan(GOOD_ARGS), make_core_verbs())
    registry = Registry(make_core_verbs())

    with pytest.raises(PlanCheckError) as raised:
        prepare_submission(
            checked, registry, "default", "order-7", {"order": "o-\x001", "amount": 1250}
        )

    assert "facts.order" in str(raised.value) and "U+0000" in str(raised.value)
    assert "o-" not in str(raised.value)


def test_every_format_character_but_the_joiners_is_escaped_and_refused() -> None:
    """The Unicode category Cf (bidi marks such as U+200E, U+200F and U+061C among them): each
    is escaped where stored text is printed and refused where it is written, save the
    zero-width non-joiner and joiner that a Persian word or an emoji sequence needs."""
    joiners = {0x200C, 0x200D}
    formats = [c for c in range(0x110000) if unicodedata.category(chr(c)) == "Cf"]
    assert {0x200E, 0x200F, 0x061C, 0xFEFF, 0xE0041} <= set(formats)
    for code in formats:
        text = f"a{chr(code)}b"
        if code in joiners:
            assert escape_unprintable(text) == text
            assert unprintable_problem(text) is None
            continue
        escaped = escape_unprintable(text)
        assert chr(code) not in escaped and json.loads(f'"{escaped}"') == text, hex(code)
        assert unprintable_problem(text) is not None, hex(code)

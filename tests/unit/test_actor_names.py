"""An actor's name shows as what it is: a character that shows as nothing (Unicode's format
characters, Cf) is refused in it, by the operator layer and by the command line's --actor,
naming the field and the code point, never the name."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from effectusd import operator
from effectusd.cli import main
from effectusd.core.operator_decisions import RefusalKind, Refused, name_problem
from effectusd.core.registry import Registry

SAGA = "a" * 64
INVISIBLE = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u180e", "\u061c"]


@pytest.mark.parametrize("char", INVISIBLE, ids=[f"U+{ord(c):04X}" for c in INVISIBLE])
def test_an_actor_with_a_character_that_shows_as_nothing_is_refused_naming_the_field(
    char: str,
) -> None:
    operation = operator.cancel(
        SAGA, registry=Registry({}), actor=f"console:oncall/al{char}ice", evidence="asked"
    )
    with pytest.raises(Refused) as raised:
        next(operation)  # refused before its first statement, the lock
    assert raised.value.kind is RefusalKind.INVALID
    assert raised.value.message.startswith(f"actor holds U+{ord(char):04X}, ")
    assert "ice" not in raised.value.message


def test_names_in_any_script_and_evidence_with_joiners_are_kept() -> None:
    for name in ("user:alice", "console:oncall/Zoë", "user:山田", "user:علي", "user:o'brien"):
        assert name_problem(name) is None
    # an emoji sequence or a Persian word needs its joiners: evidence keeps them
    operation = operator.cancel(
        SAGA, registry=Registry({}), actor="user:alice", evidence="ok \U0001f469\u200d\U0001f4bb"
    )
    assert next(operation)[0] == "lock_sagas"


def test_cli_actor_with_a_zero_width_space_exits_2_naming_the_option() -> None:
    url = "postgresql://postgres@127.0.0.1:1/none"  # refused before anything connects
    result = CliRunner().invoke(
        main,
        ["--database-url", url, "retry", SAGA, "--evidence", "ok", "--actor", "zqx\u200bvw"],
        env={"EFFECTUSD_CONFIG": None},
    )
    assert result.exit_code == 2, result.output
    assert "'--actor'" in result.output and "U+200B" in result.output
    assert "zqx" not in result.output

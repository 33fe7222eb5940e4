"""The effectusd CLI (docs/configuration.md section 3) on the shipped example config and plan.

Exit codes pinned here are the ones documented at the top of effectusd/cli/app.py:
0 ok, 1 operational failure, 3 invalid input, 4 conflict, 5 not found.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result
from psycopg import sql as psql

from effectusd.cli import main
from effectusd.config import load_config
from effectusd.core.canonical import canonical_hash
from effectusd.core.checker import check
from effectusd.core.identity import saga_id

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_CONFIG = REPO / "examples" / "effectusd.toml"
EXAMPLE_PLAN = REPO / "examples" / "checkout.json"
VECTOR_SAGA_ID = "53c4d5234ab09a8d5912898c4e385b0a86809796ccca87c3959d7755085345f8"
FACTS = {"order": "o-1", "account_id": "acc-1", "amount": 1250, "currency": "EUR"}
FACTS_JSON = json.dumps(FACTS)
UNREACHABLE_URL = "postgresql://postgres@127.0.0.1:1/effectusd"


def run(*args: str, database_url: str | None = None, config: Path = EXAMPLE_CONFIG) -> Result:
    """Invoke the CLI in-process, with the environment unable to leak a config or database."""
    options = ["--config", str(config)]
    if database_url is not None:
        options += ["--database-url", database_url]
    env = {"EFFECTUSD_CONFIG": None, "EFFECTUSD_DATABASE_URL": None}
    return CliRunner().invoke(main, [*options, *args], env=env)


def snapshot(url: str) -> dict[str, tuple[int, str]]:
    """Row count and a digest of the contents of every effectus_* table."""
    result = {}
    with psycopg.connect(url, autocommit=True) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
                "AND tablename LIKE 'effectus\\_%' ORDER BY tablename"
            ).fetchall()
        ]
        assert len(tables) >= 8, tables
        for table in tables:
            query = psql.SQL(
                "SELECT count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) "
                "FROM {} AS t"
            ).format(psql.Identifier(table))
            count, digest = conn.execute(query).fetchone()  # type: ignore[misc]
            result[table] = (count, digest)
    return result


def submit(db: str, execution_id: str, *extra: str, plan: Path = EXAMPLE_PLAN) -> Result:
    return run(
        "submit",
        str(plan),
        "--execution-id",
        execution_id,
        "--facts",
        FACTS_JSON,
        *extra,
        database_url=db,
    )


def write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data, indent=2))
    return path


# --- check -----------------------------------------------------------------------------------


def test_check_of_the_example_plan_exits_0_and_prints_the_digest() -> None:
    expected = check(json.loads(EXAMPLE_PLAN.read_text()), load_config(EXAMPLE_CONFIG).verbs)

    result = run("check", str(EXAMPLE_PLAN))

    assert result.exit_code == 0, result.output
    assert expected.plan_digest in result.stdout
    assert "reserve, charge, ship" in result.stdout


def test_check_json_reports_the_digest_and_the_steps() -> None:
    result = run("check", "--json", str(EXAMPLE_PLAN))

    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] is True
    assert report["plan_id"] == "checkout"
    assert report["steps"] == ["reserve", "charge", "ship"]
    assert len(report["plan_digest"]) == 64


BAD_PLAN = {
    "plan_id": "checkout",
    "facts": {"order": "string"},
    "steps": [
        {
            "id": "reserve",
            "verb": "inventory.reserv",
            "args": {"order": {"$fact": "order"}, "ref": {"$result": "ship"}},
            "compensate": "none",
        },
        {
            "id": "reserve",
            "verb": "shipping.schedule",
            "args": {"order": {"$fact": "orderr"}},
            "compensate": "none",
        },
    ],
}
BAD_PLAN_PROBLEMS = [
    "steps[0].verb: unknown verb 'inventory.reserv'",
    "steps[0].args.ref: $result refers to missing step 'ship'",
    "steps[1].id: duplicate step id 'reserve'",
    "steps[1].args.order: fact 'orderr' is not declared",
]


def test_check_of_a_bad_plan_exits_3_listing_every_problem(tmp_path: Path) -> None:
    plan = write_json(tmp_path / "bad.json", BAD_PLAN)

    result = run("check", str(plan))

    assert result.exit_code == 3, result.output
    assert f"{len(BAD_PLAN_PROBLEMS)} problem(s)" in result.stderr
    for problem in BAD_PLAN_PROBLEMS:
        assert problem in result.stderr
    assert result.stdout == ""


def test_check_json_of_a_bad_plan_exits_3_listing_every_problem(tmp_path: Path) -> None:
    plan = write_json(tmp_path / "bad.json", BAD_PLAN)

    result = run("check", "--json", str(plan))

    assert result.exit_code == 3, result.output
    report = json.loads(result.stdout)
    assert report["ok"] is False
    for problem in BAD_PLAN_PROBLEMS:
        assert any(problem in line for line in report["problems"]), problem
    assert len(report["problems"]) == len(BAD_PLAN_PROBLEMS)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        pytest.param('{"plan_id": ', "malformed JSON", id="truncated"),
        pytest.param('{"plan_id": "a", "plan_id": "b"}', "duplicate object key", id="dup-key"),
        pytest.param('{"plan_id": NaN}', "NaN is not JSON", id="nan"),
        pytest.param(
            '{"plan_id": ' + "[" * 980 + "]" * 980 + "}",
            "nests deeper than 64 levels",
            id="980-levels",
        ),
        pytest.param(
            '{"plan_id": ' + "[" * 100_000 + "]" * 100_000 + "}",
            "nests deeper than 64 levels",
            id="100000-levels",
        ),
    ],
)
def test_check_of_an_unparsable_plan_file_exits_3_naming_the_file(
    tmp_path: Path, text: str, reason: str
) -> None:
    plan = tmp_path / "broken.json"
    plan.write_text(text)

    result = run("check", str(plan))

    assert result.exit_code == 3, result.output
    assert str(plan) in result.stderr
    assert reason in result.stderr


def test_check_with_a_config_setting_a_reserved_header_exits_3_naming_file_and_key(
    tmp_path: Path,
) -> None:
    config = tmp_path / "effectusd.toml"
    config.write_text(
        EXAMPLE_CONFIG.read_text().replace(
            'headers = { "X-Team" = "checkout" }',
            'headers = { "X-Team" = "checkout", "X-Effectus-Attempt" = "1" }',
        )
    )
    assert "X-Effectus-Attempt" in config.read_text()

    result = run("check", str(EXAMPLE_PLAN), config=config)

    assert result.exit_code == 3, result.output
    assert str(config) in result.stderr
    assert "destinations.payments.headers" in result.stderr
    assert "X-Effectus-Attempt" in result.stderr


# --- check -o, then submit the checked plan ---------------------------------------------------


def test_checked_output_file_can_be_submitted_and_matches_the_raw_plan(
    db: str, tmp_path: Path
) -> None:
    checked = tmp_path / "out.json"

    wrote = run("check", "-o", str(checked), str(EXAMPLE_PLAN))
    submitted = submit(db, "order-9", plan=checked)
    raw_again = submit(db, "order-9")

    assert wrote.exit_code == 0, wrote.output
    document = json.loads(checked.read_text())
    assert document["plan_digest"] in wrote.stdout
    assert submitted.exit_code == 0, submitted.output
    expected_id = saga_id("default", "order-9", "checkout")
    assert f"submitted saga {expected_id}" in submitted.stdout
    assert raw_again.exit_code == 0, raw_again.output
    assert f"already submitted saga {expected_id}" in raw_again.stdout


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        pytest.param(
            lambda d: d.__setitem__("plan_digest", "0" * 64),
            "plan_digest: does not match",
            id="edited-digest",
        ),
        pytest.param(
            lambda d: d["steps"][0]["args"].__setitem__("sku", "book-43"),
            "plan_digest: does not match",
            id="edited-args",
        ),
        pytest.param(
            lambda d: d["steps"][1].__setitem__("contract_hash", "0" * 64),
            "plan_digest: does not match",
            id="edited-contract-hash",
        ),
    ],
)
def test_submit_of_an_edited_checked_plan_exits_3_and_changes_nothing(
    db: str, tmp_path: Path, edit: Any, reason: str
) -> None:
    checked = tmp_path / "out.json"
    assert run("check", "-o", str(checked), str(EXAMPLE_PLAN)).exit_code == 0
    assert submit(db, "order-1").exit_code == 0
    document = json.loads(checked.read_text())
    edit(document)
    write_json(checked, document)
    before = snapshot(db)

    result = submit(db, "order-9", plan=checked)

    assert result.exit_code == 3, result.output
    assert reason in result.stderr
    assert snapshot(db) == before


def test_submit_of_a_redigested_checked_plan_with_a_duplicate_step_id_exits_3(
    db: str, tmp_path: Path
) -> None:
    checked = tmp_path / "out.json"
    assert run("check", "-o", str(checked), str(EXAMPLE_PLAN)).exit_code == 0
    document = json.loads(checked.read_text())
    document["steps"][2]["id"] = "charge"
    body = {key: value for key, value in document.items() if key != "plan_digest"}
    document["plan_digest"] = canonical_hash(body)
    write_json(checked, document)
    before = snapshot(db)

    result = submit(db, "order-9", plan=checked)

    assert result.exit_code == 3, result.output
    assert "duplicate step id 'charge'" in result.stderr
    assert snapshot(db) == before


# --- submit and sagas show / list -------------------------------------------------------------


def test_submit_then_sagas_show_json_gives_the_documented_shape(db: str) -> None:
    submitted = submit(db, "order-7")
    assert submitted.exit_code == 0, submitted.output
    assert VECTOR_SAGA_ID in submitted.stdout

    result = run("sagas", "show", VECTOR_SAGA_ID, "--json", database_url=db)

    assert result.exit_code == 0, result.output
    view = json.loads(result.stdout)
    assert view["saga_id"] == VECTOR_SAGA_ID
    assert view["execution_id"] == "order-7"
    assert view["plan_id"] == "checkout"
    assert view["state"] == "running"
    steps = view["steps"]
    assert [(s["effect_id"], s["sequence"], s["state"]) for s in steps] == [
        ("reserve", 0, "in_progress"),
        ("charge", 1, "pending"),
        ("ship", 2, "pending"),
    ]
    for step in steps:
        assert isinstance(step["dispatches"], list)
    (dispatch,) = steps[0]["dispatches"]
    assert {"direction", "state", "attempt", "idempotency_key", "attempts"} <= set(dispatch)
    assert (dispatch["direction"], dispatch["state"], dispatch["attempt"]) == (
        "forward",
        "queued",
        0,
    )
    assert len(dispatch["idempotency_key"]) == 64
    assert dispatch["attempts"] == []
    assert [event["kind"] for event in view["timeline"]] == [
        "saga_submitted",
        "dispatch_enqueued",
    ]
    assert all(event["actor"] == "cli" for event in view["timeline"])


def test_sagas_show_human_output_names_the_saga_and_its_steps(db: str) -> None:
    assert submit(db, "order-7").exit_code == 0

    result = run("sagas", "show", VECTOR_SAGA_ID, database_url=db)

    assert result.exit_code == 0, result.output
    assert VECTOR_SAGA_ID in result.stdout
    for effect_id in ("reserve", "charge", "ship"):
        assert effect_id in result.stdout


def test_submit_not_before_schedules_the_first_dispatch(db: str) -> None:
    result = submit(db, "order-7", "--not-before", "2999-01-02T03:04:05")
    assert result.exit_code == 0, result.output

    with psycopg.connect(db, autocommit=True) as conn:
        (next_attempt_at,) = conn.execute(
            "SELECT next_attempt_at FROM effectus_saga_outbox"
        ).fetchone()  # type: ignore[misc]
    assert next_attempt_at == datetime(2999, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_sagas_list_json_and_state_filter(db: str) -> None:
    assert submit(db, "order-7").exit_code == 0
    assert submit(db, "order-8").exit_code == 0
    finished = saga_id("default", "order-8", "checkout")
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "UPDATE effectus_saga_instances SET state = 'completed', finished_at = now() "
            "WHERE saga_id = %s",
            (finished,),
        )

    everything = run("sagas", "list", "--json", database_url=db)
    running = run("sagas", "list", "--json", "--state", "running", database_url=db)
    completed = run("sagas", "list", "--json", "--state", "completed", database_url=db)

    for result in (everything, running, completed):
        assert result.exit_code == 0, result.output
    rows = json.loads(everything.stdout)
    assert {row["saga_id"] for row in rows} == {VECTOR_SAGA_ID, finished}
    for row in rows:
        assert {"saga_id", "execution_id", "plan_id", "state"} <= set(row)
    assert [(r["saga_id"], r["state"]) for r in json.loads(running.stdout)] == [
        (VECTOR_SAGA_ID, "running")
    ]
    assert [(r["saga_id"], r["state"]) for r in json.loads(completed.stdout)] == [
        (finished, "completed")
    ]


def test_sagas_list_of_an_unknown_state_is_a_usage_error(db: str) -> None:
    result = run("sagas", "list", "--state", "finished", database_url=db)

    assert result.exit_code == 2, result.output


def test_sagas_show_of_an_unknown_saga_exits_5(db: str) -> None:
    result = run("sagas", "show", "0" * 64, database_url=db)

    assert result.exit_code == 5, result.output
    assert "not found" in result.stderr


# --- refused submits ------------------------------------------------------------------------


def test_submit_with_conflicting_facts_exits_4_and_changes_nothing(db: str) -> None:
    assert submit(db, "order-7").exit_code == 0
    before = snapshot(db)

    result = run(
        "submit",
        str(EXAMPLE_PLAN),
        "--execution-id",
        "order-7",
        "--facts",
        json.dumps({**FACTS, "amount": 9999}),
        database_url=db,
    )

    assert result.exit_code == 4, result.output
    assert "facts differ" in result.stderr
    assert snapshot(db) == before


@pytest.mark.parametrize(
    ("facts", "reason"),
    [
        pytest.param('{"order": ', "malformed JSON", id="truncated"),
        pytest.param('["o-1"]', "must be a JSON object", id="not-an-object"),
        pytest.param('{"amount": NaN}', "NaN is not JSON", id="nan"),
        pytest.param('{"order": "a", "order": "b"}', "duplicate object key", id="dup-key"),
        pytest.param(
            json.dumps({**FACTS, "amount": "1250"}), "expected integer", id="wrong-fact-type"
        ),
        pytest.param(
            json.dumps({**FACTS, "amount": 2**60}), "integer outside", id="unsafe-integer"
        ),
        pytest.param(
            '{"order": ' + '{"k":' * 980 + "1" + "}" * 980 + "}",
            "nests deeper than 64 levels",
            id="980-levels",
        ),
        pytest.param(
            '{"order": ' + "[" * 100_000 + "]" * 100_000 + "}",
            "nests deeper than 64 levels",
            id="100000-levels",
        ),
    ],
)
def test_submit_with_bad_facts_exits_3_and_changes_nothing(
    db: str, facts: str, reason: str
) -> None:
    assert submit(db, "order-1").exit_code == 0
    before = snapshot(db)

    result = run(
        "submit",
        str(EXAMPLE_PLAN),
        "--execution-id",
        "order-7",
        "--facts",
        facts,
        database_url=db,
    )

    assert result.exit_code == 3, result.output
    assert "facts" in result.stderr
    assert reason in result.stderr
    assert snapshot(db) == before


def test_submit_with_an_execution_id_containing_a_space_exits_3_and_changes_nothing(
    db: str,
) -> None:
    assert submit(db, "order-1").exit_code == 0
    before = snapshot(db)

    result = submit(db, "order 7")

    assert result.exit_code == 3, result.output
    assert "execution_id" in result.stderr
    assert snapshot(db) == before


# --- operational failures ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(["migrate", "--check"], id="migrate-check"),
        pytest.param(["migrate"], id="migrate"),
        pytest.param(
            ["submit", str(EXAMPLE_PLAN), "--execution-id", "order-7", "--facts", FACTS_JSON],
            id="submit",
        ),
        pytest.param(["sagas", "list"], id="sagas-list"),
        pytest.param(["sagas", "show", VECTOR_SAGA_ID], id="sagas-show"),
    ],
)
def test_unreachable_database_exits_1_naming_the_failure_never_the_drivers_text(
    command: list[str],
) -> None:
    # The driver's message names the host, the port and the user (and libpq's may quote the
    # URL): the line gives the failure's class only.
    result = run(*command, database_url=UNREACHABLE_URL)

    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("error: ")
    assert result.stderr.strip().endswith(": OperationalError")
    assert "127.0.0.1" not in result.output
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit)


HIDDEN_CHARACTERS = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
C1_CONTROLS = "".join(chr(code) for code in range(0x80, 0xA0))


def test_sagas_show_json_escapes_bidi_and_c1_characters_and_parses_to_the_same_facts(
    db: str,
) -> None:
    order = f"o-1{HIDDEN_CHARACTERS}{C1_CONTROLS}end"
    facts = {**FACTS, "order": order}
    submitted = run(
        "submit",
        str(EXAMPLE_PLAN),
        "--execution-id",
        "order-bidi",
        "--facts",
        json.dumps(facts),
        database_url=db,
    )
    assert submitted.exit_code == 0, submitted.output
    listed = json.loads(run("sagas", "list", "--json", database_url=db).stdout)

    result = run("sagas", "show", listed[0]["saga_id"], "--json", database_url=db)

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["facts"] == facts
    assert [c for c in HIDDEN_CHARACTERS + C1_CONTROLS if c in result.stdout] == []
    assert "\\u202e" in result.stdout and "\\u0085" in result.stdout

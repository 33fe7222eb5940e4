"""Plans: check, submit."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path

import click

from effectusd.cli.app import (
    EXIT_CONFLICT,
    EXIT_INVALID,
    Context,
    emit,
    fail,
    json_option,
    main,
    read_json_file,
    report_check_error,
)
from effectusd.cli.stores import store_option
from effectusd.core.canonical import MAX_JSON_DEPTH, parse_json
from effectusd.core.checker import PlanCheckError, check
from effectusd.core.submission import SubmitConflict, SubmitError


@main.command("check")
@click.argument("plan_file", type=click.Path(dir_okay=False))
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False),
    help="Write the checked plan (with contract hashes and digest) to this file.",
)
@json_option
@click.pass_obj
def check_command(obj: Context, plan_file: str, output: str | None, as_json: bool) -> None:
    """Check a plan against the configured verbs; report every problem at once."""
    plan = read_json_file(plan_file, "plan")
    try:
        checked = check(plan, obj.config.verbs)
    except PlanCheckError as exc:
        if as_json:
            emit({"ok": False, "problems": [str(i) for i in exc.issues]}, True, str)
            sys.exit(EXIT_INVALID)
        report_check_error(plan_file, exc)
    if output:
        Path(output).write_text(json.dumps(checked.document(), indent=2) + "\n", encoding="utf-8")
    emit(
        {
            "ok": True,
            "plan_id": checked.plan_id,
            "plan_digest": checked.plan_digest,
            "steps": [s.id for s in checked.steps],
        },
        as_json,
        lambda d: (
            f"{plan_file}: ok — plan {d['plan_id']}, {len(d['steps'])} step(s) "
            f"({', '.join(d['steps'])}), digest {d['plan_digest']}"
        ),
    )


@main.command()
@click.argument("plan_file", type=click.Path(dir_okay=False))
@click.option("--execution-id", required=True, help="Your business id for this run (e.g. order-7).")
@click.option("--facts", "facts_json", default="{}", help="Facts as a JSON object.")
@click.option(
    "--not-before",
    type=click.DateTime(formats=["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%S"]),
    help="Do not dispatch the first step before this time (ISO 8601; UTC if no offset).",
)
@store_option("Into this store of [database.stores], in its namespace (needed with several).")
@json_option
@click.pass_obj
def submit(
    obj: Context,
    plan_file: str,
    execution_id: str,
    facts_json: str,
    not_before: datetime | None,
    store_label: str | None,
    as_json: bool,
) -> None:
    """Submit a plan (raw or checked) as a new saga. Re-submitting the same is a no-op."""
    obj.selected = store_label
    plan = read_json_file(plan_file, "plan")
    try:
        facts = parse_json(facts_json, MAX_JSON_DEPTH)
    except ValueError as exc:
        fail(f"--facts: {exc}", EXIT_INVALID)
    if not isinstance(facts, dict):
        fail("--facts must be a JSON object", EXIT_INVALID)
    if not_before is not None and not_before.tzinfo is None:
        from datetime import UTC

        not_before = not_before.replace(tzinfo=UTC)
    obj.check_writable()
    try:
        result = obj.client().submit(
            plan, execution_id=execution_id, facts=facts, not_before=not_before, actor="cli"
        )
    except PlanCheckError as exc:
        report_check_error(plan_file, exc)
    except SubmitConflict as exc:
        fail(str(exc), EXIT_CONFLICT)
    except SubmitError as exc:
        fail(str(exc), EXIT_INVALID)
    emit(
        {"saga_id": result.saga_id, "created": result.created},
        as_json,
        lambda d: f"{'submitted' if d['created'] else 'already submitted'} saga {d['saga_id']}",
    )

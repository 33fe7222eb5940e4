"""The destination kit's operator commands, for the service's own database:

    python -m effectusd.destination keys show KEY --database-url URL [--json]
    python -m effectusd.destination keys forget KEY --evidence TEXT --database-url URL [--force]

Exit codes as effectusd's: 0 ok, 1 operational failure, 2 usage, 3 invalid input,
4 conflict, 5 not found.
"""

from __future__ import annotations

import getpass
import json
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import click

from effectusd.backends.errors import POSTGRES_ERRORS, unavailable_text
from effectusd.core.database_url import DatabaseURLError
from effectusd.destination.keys import (
    ForgetReport,
    KeyRefused,
    KeyReport,
    StoredKey,
    forget_key,
    show_key,
)

EXIT_FAILURE = 1
_EXIT = {"invalid": 3, "conflict": 4, "not_found": 5}
_DATABASE_ERRORS: tuple[type[BaseException], ...] = (*POSTGRES_ERRORS, OSError)

database_option = click.option(
    "--database-url",
    required=True,
    help="The service's database: postgresql://… or sqlite:///file.db (not effectusd's).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


def _fail(message: str, code: int, as_json: bool, kind: str | None = None) -> NoReturn:
    if as_json and kind is not None:
        click.echo(json.dumps({"ok": False, "refused": kind, "error": message}))
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def _run(work: Callable[[], Any], as_json: bool) -> Any:
    try:
        return work()
    except KeyRefused as exc:
        _fail(exc.message, _EXIT[exc.kind], as_json, exc.kind)
    except DatabaseURLError as exc:
        _fail(f"--database-url: {exc}", _EXIT["invalid"], as_json, "invalid")
    except _DATABASE_ERRORS as exc:
        # the class and SQLSTATE only: the driver's message can quote the host and the user
        _fail(f"database: {unavailable_text(exc)}", EXIT_FAILURE, as_json)


def _record_lines(record: StoredKey) -> list[str]:
    return [
        f"  answer    {record.answer} ({record.status_code}) {record.response_body}",
        f"  asked by  saga {record.saga_id} {record.effect_id} ({record.direction}), "
        f"verb {record.verb}, attempt {record.attempt}, request {record.request_id}",
        f"  stored    {record.completed_at or record.created_at}, expires {record.expires_at}",
    ]


def _show_text(report: KeyReport) -> str:
    lines = [f"key {report.key}"]
    if report.record is None:
        lines.append("  no stored answer: the next request with this key runs the mutation")
    else:
        lines += _record_lines(report.record)
    for entry in report.audit:
        forced = " (forced)" if entry.forced else ""
        lines.append(
            f"  {entry.action} #{entry.audit_id} at {entry.at} by {entry.actor}{forced}: "
            f"{entry.evidence} [was {entry.outcome or 'success'} ({entry.status_code})]"
        )
    return "\n".join(lines)


def _forget_text(report: ForgetReport) -> str:
    forced = " (forced)" if report.forced else ""
    return "\n".join(
        [
            f"forgot key {report.key}{forced}",
            *_record_lines(report.forgotten),
            f"  audit     #{report.audit_id} by {report.actor}: {report.evidence}",
            "  the next request with this key runs the mutation again "
            "(e.g. after `effectusd retry SAGA_ID`)",
        ]
    )


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """effectusd destination kit: operator commands for a kit-based service's database."""


@main.group()
def keys() -> None:
    """Stored answers under idempotency keys (the kit's ledger)."""


@keys.command("show")
@click.argument("key")
@database_option
@json_option
def show(key: str, database_url: str, as_json: bool) -> None:
    """Show the answer stored under KEY, who asked first, and what operators did to it."""
    report: KeyReport = _run(lambda: show_key(database_url, key), as_json)
    click.echo(json.dumps(report.as_dict(), indent=2) if as_json else _show_text(report))


@keys.command("forget")
@click.argument("key")
@click.option("--evidence", required=True, help="Why it may be forgotten (kept in the audit).")
@click.option("--actor", help="Who is acting, for the audit (default: user:<your OS user>).")
@click.option(
    "--force",
    is_flag=True,
    help="Also forget a stored success. The next request then runs the mutation again: "
    "a double effect unless you undid the first one.",
)
@database_option
@json_option
def forget(
    key: str, evidence: str, actor: str | None, force: bool, database_url: str, as_json: bool
) -> None:
    """Forget the answer stored under KEY, so the next request with it runs the mutation.

    For a saga blocked on a stored permanent failure (e.g. blocked_compensation): once the
    cause is fixed, forget the key, then `effectusd retry SAGA_ID` sends it again and the
    mutation really runs. Only a permanent failure is forgotten unless --force: forgetting a
    success lets a retry do the effect twice. The record, actor and evidence go to
    effectus_dest_key_audit in the same transaction.
    """
    who = actor or f"user:{getpass.getuser()}"
    report: ForgetReport = _run(
        lambda: forget_key(database_url, key, evidence=evidence, actor=who, force=force), as_json
    )
    click.echo(json.dumps(report.as_dict(), indent=2) if as_json else _forget_text(report))

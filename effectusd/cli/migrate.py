"""The schema: migrate (and its --check for deploy scripts)."""

from __future__ import annotations

import sys

import click

from effectusd.backends.migrations import MigrationError
from effectusd.cli.app import EXIT_CONFLICT, EXIT_PENDING, Context, emit, fail, json_option, main


@main.command()
@click.option(
    "--check", "check_only", is_flag=True, help="Only report; exit 6 if anything is pending."
)
@json_option
@click.pass_obj
def migrate(obj: Context, check_only: bool, as_json: bool) -> None:
    """Apply pending schema migrations (one migrator at a time)."""
    with obj.connect(create=not check_only, write=not check_only) as conn:
        backend = obj.backend
        try:
            if check_only:
                current = backend.migrator.status(conn)
                data = {
                    "applied": current.applied,
                    "pending": [f"{m.version}_{m.name}" for m in current.pending],
                    "problems": current.problems,
                }
                emit(
                    data,
                    as_json,
                    lambda d: "\n".join(
                        [
                            f"applied: {', '.join(map(str, d['applied'])) or 'none'}",
                            f"pending: {', '.join(d['pending']) or 'none'}",
                        ]
                        + [f"problem: {p}" for p in d["problems"]]
                    ),
                )
                if current.problems:
                    sys.exit(EXIT_CONFLICT)
                if current.pending:
                    sys.exit(EXIT_PENDING)
                return
            applied = backend.migrator.migrate(conn)
        except MigrationError as exc:
            fail(str(exc), EXIT_CONFLICT)
    names = [f"{m.version}_{m.name}" for m in applied]
    emit(
        {"applied": names},
        as_json,
        lambda d: "\n".join(f"applied {n}" for n in d["applied"]) or "schema is up to date",
    )

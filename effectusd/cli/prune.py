"""prune: finished sagas out, their tombstones kept for as long as destinations may remember."""

from __future__ import annotations

from datetime import timedelta

import click

from effectusd.cli.app import Context, Duration, emit, json_option, main

DEFAULT_KEEP_TOMBSTONES = "30d"  # longer than the destination kit keeps idempotency records (7d)


@main.command()
@click.option(
    "--older-than",
    required=True,
    type=Duration(),
    help="Finished longer ago than this (with a unit: 30d, 12h, 90m, 45s).",
)
@click.option(
    "--keep-tombstones",
    default=DEFAULT_KEEP_TOMBSTONES,
    show_default=True,
    type=Duration(never=True),
    help=(
        "Delete the tombstones of sagas pruned longer ago than this, or 'never'. A tombstone "
        "refuses a new saga with a pruned saga's identity (it would send the same idempotency "
        "keys): keep them at least as long as any destination keeps its idempotency records."
    ),
)
@click.option("--dry-run", is_flag=True, help="Only list what would be deleted.")
@click.option("--batch-size", default=500, show_default=True, type=click.IntRange(1, 100_000))
@json_option
@click.pass_obj
def prune(
    obj: Context,
    older_than: timedelta,
    keep_tombstones: timedelta | None,
    dry_run: bool,
    batch_size: int,
    as_json: bool,
) -> None:
    """Delete finished sagas (completed, compensated, failed) with their steps, outbox rows,
    attempts and timeline; each batch is its own transaction. Blocked and live sagas stay.
    Each pruned saga leaves a tombstone of its identity."""
    from effectusd import operator

    with obj.connect(write=not dry_run) as conn:
        report = operator.prune(obj.backend, conn, older_than, batch_size, dry_run, keep_tombstones)
    emit(report.as_dict(), as_json, lambda _: report.summary())

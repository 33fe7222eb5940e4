"""prune: finished sagas out, their tombstones kept for as long as destinations may remember."""

from __future__ import annotations

import sys
from datetime import timedelta
from typing import TYPE_CHECKING

import click

from effectusd.backends import Connection
from effectusd.cli.app import EXIT_FAILURE, Context, Duration, StoreContext, emit, json_option, main
from effectusd.cli.stores import emit_by_store, store_option, warn
from effectusd.store.across import each_store

if TYPE_CHECKING:
    from effectusd.operator import PruneReport

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
@store_option()
@json_option
@click.pass_obj
def prune(
    obj: Context,
    older_than: timedelta,
    keep_tombstones: timedelta | None,
    dry_run: bool,
    batch_size: int,
    store_label: str | None,
    as_json: bool,
) -> None:
    """Delete finished sagas (completed, compensated, failed) with their steps, outbox rows,
    attempts and timeline; each batch is its own transaction. Blocked and live sagas stay.
    Each pruned saga leaves a tombstone of its identity. With several stores, each is pruned
    in turn and reported by its label (--store: only that one)."""
    from effectusd import operator

    stores = obj.stores(store_label)

    def prune_store(store: StoreContext, conn: Connection) -> PruneReport:
        args = (older_than, batch_size, dry_run, keep_tombstones)
        return operator.prune(store.backend, conn, *args)

    if len(stores) == 1 and stores[0].label is None:
        with stores[0].connect(write=not dry_run) as conn:
            report = prune_store(stores[0], conn)
        emit(report.as_dict(), as_json, lambda _: report.summary())
        return

    def prune_own(store: StoreContext) -> PruneReport:
        with store.open(write=not dry_run) as conn:
            return prune_store(store, conn)

    done, unreached = each_store(stores, prune_own)
    emit_by_store(done, unreached, as_json)
    warn(unreached, "pruned")
    if unreached:
        sys.exit(EXIT_FAILURE)

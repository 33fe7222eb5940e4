"""prune: delete finished sagas (completed, compensated, failed) older than a duration, and
the tombstones of sagas pruned longer ago than another.

Batches of ``batch_size`` sagas, each its own transaction, so a large prune never holds
locks for long; steps, outbox rows, attempts and timeline rows go with their saga (ON DELETE
CASCADE). Blocked and live sagas have no finished_at and are never selected. Each deleted
saga leaves a tombstone (written by the delete itself, see 10005_saga_tombstones), which keeps
its identity, and so its idempotency keys, from being used by a new saga.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from effectusd.backends import Backend, Connection
from effectusd.backends.operation import Operation, Rows, single


@dataclass
class PruneReport:
    older_than_s: float
    cutoff: datetime
    dry_run: bool
    count: int = 0
    batches: int = 0
    by_state: dict[str, int] = field(default_factory=dict)
    sagas: list[dict[str, Any]] = field(default_factory=list)  # dry run: what would go
    tombstone_cutoff: datetime | None = None  # None: tombstones are kept
    tombstones: int = 0  # deleted (or, in a dry run, that would be)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": True,
            "dry_run": self.dry_run,
            "older_than_s": self.older_than_s,
            "cutoff": self.cutoff.isoformat(),
            "count": self.count,
            "batches": self.batches,
            "by_state": self.by_state,
            "sagas": [
                {**saga, "finished_at": saga["finished_at"].isoformat()} for saga in self.sagas
            ],
            "tombstone_cutoff": (
                None if self.tombstone_cutoff is None else self.tombstone_cutoff.isoformat()
            ),
            "tombstones_deleted": self.tombstones,
        }

    def summary(self) -> str:
        states = ", ".join(f"{n} {state}" for state, n in sorted(self.by_state.items()))
        verb = "would delete" if self.dry_run else "deleted"
        head = f"{verb} {self.count} finished saga(s) older than {self.cutoff.isoformat()}" + (
            f" ({states})" if states else ""
        )
        if not self.dry_run:
            head = f"{head} in {self.batches} batch(es)"
        if self.tombstone_cutoff is None:
            tail = "tombstones kept"
        else:
            tail = (
                f"{verb} {self.tombstones} tombstone(s) of sagas pruned before "
                f"{self.tombstone_cutoff.isoformat()}"
            )
        rows = [
            f"  {s['saga_id']}  {s['state']:11}  {s['finished_at'].isoformat()}  "
            f"{s['plan_id']}/{s['execution_id']}"
            for s in self.sagas
        ]
        return "\n".join([head, tail, *rows])


def prune(
    backend: Backend,
    conn: Connection,
    older_than: timedelta,
    batch_size: int,
    dry_run: bool,
    keep_tombstones: timedelta | None = None,
) -> PruneReport:
    """``keep_tombstones``: delete tombstones of sagas pruned longer ago than this (None: keep
    them all). Keep them at least as long as any destination keeps its idempotency records."""
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")

    def run(operation: Operation[Rows]) -> Rows:
        return backend.runner.run(conn, operation)

    seconds = older_than.total_seconds()
    [row] = run(single("op_prune_cutoff", {"older_than_s": seconds}))
    report = PruneReport(seconds, row["cutoff"], dry_run)
    if keep_tombstones is not None:
        # before the sagas: this run's own tombstones are never among those it deletes
        keep = {"older_than_s": keep_tombstones.total_seconds()}
        [row] = run(single("op_prune_cutoff", keep))
        report.tombstone_cutoff = row["cutoff"]
        cutoff = {"cutoff": report.tombstone_cutoff}
        if dry_run:
            [counted] = run(single("op_prune_tombstones_preview", cutoff))
            report.tombstones = int(counted["count"])
        else:
            report.tombstones = len(run(single("op_prune_tombstones", cutoff)))
    states: Counter[str] = Counter()
    if dry_run:
        report.sagas = run(single("op_prune_preview", {"cutoff": report.cutoff}))
        states.update(s["state"] for s in report.sagas)
        report.count = len(report.sagas)
    else:
        while True:
            deleted = run(single("op_prune_batch", {"cutoff": report.cutoff, "limit": batch_size}))
            if deleted:
                report.batches += 1
                report.count += len(deleted)
                states.update(s["state"] for s in deleted)
            if len(deleted) < batch_size:
                break
    report.by_state = dict(states)
    return report

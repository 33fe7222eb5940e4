"""The write-ahead step of a store: fencing tokens taken and each claim marked sent, in one
transaction, before anything is called. A provider whose tokens live elsewhere (the fencing
authority of several stores) takes them just before that transaction (``FencingProvider.grant``).

A claim that must not be called (a fencing resource held by another live dispatch, or its own
write-ahead failed) comes back as a known-not-committed completion for the recorder.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from functools import partial
from typing import Any, TypeVar

from effectusd.backends.errors import failure_name
from effectusd.backends.isolation import isolate
from effectusd.backends.operation import Operation
from effectusd.core.canonical import canonical_text
from effectusd.core.engine import FENCE_WAIT_ENDED
from effectusd.core.states import Cause, FencingStatus
from effectusd.core.transition import Completion, Event, FenceWait
from effectusd.fencing.protocol import (
    AuthorityUnreachable,
    FenceBusy,
    FenceHolder,
    FencingProvider,
)
from effectusd.store.records import Claim, WriteAhead
from effectusd.store.rows import event_params

T = TypeVar("T")
log = logging.getLogger("effectusd.store")


class WriteAheadStore:
    """The write-ahead half of ``DispatchStore`` (which supplies ``_write``)."""

    owner: str
    fencing: FencingProvider

    async def _write(self, operation: Operation[T]) -> T:
        raise NotImplementedError

    async def _write_single(self, operation: Operation[T]) -> T:
        """An operation of exactly one write statement, which is atomic by itself: a store may
        spare the BEGIN/COMMIT round trips."""
        return await self._write(operation)

    async def write_ahead(
        self, claims: Sequence[Claim]
    ) -> tuple[list[WriteAhead], list[Completion]]:
        """Take fencing tokens and mark each claim sent, in one transaction.

        Returns the claims that may now be called, and known-not-committed completions for the
        claims that must not be: a fencing resource is held by another live dispatch (a fence
        wait), or the claim's own write-ahead failed (the error is the evidence). A failed batch
        is split until the claim that fails alone is found (``isolate``), so one bad claim
        never holds back the others.
        """
        wanted = [(_holder(claim), claim.fencing_resources) for claim in claims]
        fenced = [(holder, resources) for holder, resources in wanted if resources]
        fencing = (await self.fencing.grant(fenced)) if fenced else self.fencing
        return await isolate(
            claims,
            partial(self._write_ahead_batch, fencing=fencing),
            self._write_ahead_alone,
            _both,
            _note_failed,
        )

    async def _write_ahead_batch(
        self, claims: Sequence[Claim], fencing: FencingProvider
    ) -> tuple[list[WriteAhead], list[Completion]]:
        operation = self._write_ahead(claims, fencing)
        if any(claim.fencing_resources for claim in claims):
            return await self._write(operation)
        return await self._write_single(operation)  # unfenced: the one write_ahead statement

    async def _write_ahead_alone(
        self, claim: Claim, error: Exception
    ) -> tuple[list[WriteAhead], list[Completion]]:
        """Nothing is ever called after a failed write-ahead: known not committed."""
        log.warning(
            "write-ahead of dispatch %s failed (%s); nothing was sent",
            claim.dispatch_id,
            failure_name(error),
        )
        failed = f"write-ahead failed ({failure_name(error)}); nothing was sent"
        return [], [Completion.not_sent(claim, Cause.WRITE_AHEAD_FAILED, failed, actor=self.owner)]

    def _write_ahead(
        self, claims: Sequence[Claim], fencing: FencingProvider | None = None
    ) -> Operation[tuple[list[WriteAhead], list[Completion]]]:
        """``fencing``: what ``FencingProvider.grant`` returned for this batch (by default the
        store's provider itself, whose tokens live in the store)."""
        fencing = fencing or self.fencing
        ready: list[WriteAhead] = []
        waiting: list[tuple[Claim, FenceBusy]] = []  # (claim, why it may not be sent)
        fenced = [claim for claim in claims if claim.fencing_resources]
        if fenced:
            # Claims are taken in claim order, each claim's resources in canonical order: only
            # one global lock order over the whole batch keeps two batches from deadlocking.
            yield from fencing.lock([r for claim in fenced for r in claim.fencing_resources])
        for claim in claims:
            if not claim.fencing_resources:
                ready.append(WriteAhead(claim, (), FencingStatus.NOT_REQUESTED))
                continue
            try:
                grants = yield from fencing.acquire(_holder(claim), claim.fencing_resources)
            except FenceBusy as taken:
                waiting.append((claim, taken))
            else:
                ready.append(WriteAhead(claim, grants, fencing.status))
        busy = (yield from self._fence_waits(waiting)) if waiting else []
        if not ready:
            return [], busy
        marked_rows = yield (
            "write_ahead",
            {
                "dispatch_ids": [w.claim.dispatch_id for w in ready],
                "attempts": [w.claim.attempt for w in ready],
                "lease_tokens": [w.claim.lease_token for w in ready],
                "grants": [grants_json(w.grants) for w in ready],
                "fencing_statuses": [w.fencing_status.value for w in ready],
            },
        )
        marked = {row["dispatch_id"] for row in marked_rows}
        sent = [w for w in ready if w.claim.dispatch_id in marked]
        ended = [w.claim for w in sent if w.claim.fence_waiting]
        if ended:  # the write-ahead ends a wait for a busy resource: stored on the timeline
            yield ("insert_event", [self._fence_wait_ended(claim) for claim in ended])
        return sent, busy

    def _fence_wait_ended(self, claim: Claim) -> dict[str, Any]:
        detail = {"ended": "sent", "waits": claim.fence_waits}
        event = Event(
            FENCE_WAIT_ENDED,
            claim.effect_id,
            claim.direction.value,
            claim.attempt,
            actor=self.owner,
            detail=detail,
        )
        return event_params(claim.saga_id, event)

    def _fence_waits(
        self, waiting: Sequence[tuple[Claim, FenceBusy]]
    ) -> Operation[list[Completion]]:
        """Count each busy claim as a fence wait (not an attempt of the retry budget) and tell
        the engine how long the wait has lasted and who holds the resource. A claim whose
        tokens could not be asked for (the fencing authority unreachable) waits too, but such
        a round is not counted: it starts no wait and never blocks the dispatch."""
        counted = [(c, why) for c, why in waiting if not isinstance(why, AuthorityUnreachable)]
        marked = (yield ("mark_fence_waits", _holders_params(counted))) if counted else []
        waited = {row["dispatch_id"]: float(row["waited_s"] or 0.0) for row in marked}
        started = {row["dispatch_id"] for row in marked if row["started"]}
        unnamed = sorted({why.resource for _, why in counted if why.holder is None})
        holders = {
            row["resource"]: row
            for row in ((yield ("select_fence_holders", {"resources": unnamed})) if unnamed else [])
        }
        busy = []
        for claim, why in waiting:
            who = why.holder or _holder_name(holders.get(why.resource))
            busy.append(
                Completion.not_sent(
                    claim,
                    FenceWait(
                        timedelta(seconds=max(waited.get(claim.dispatch_id, 0.0), 0.0)),
                        who,
                        why.resource or None,
                        claim.dispatch_id in started,
                    ),
                    _waiting_reason(why, who),
                    actor=self.owner,
                )
            )
        return busy


def _holder(claim: Claim) -> FenceHolder:
    return FenceHolder(claim.dispatch_id, claim.lease_token, claim.lease_expires_at, claim.saga_id)


def _waiting_reason(why: FenceBusy, who: str) -> str:
    if isinstance(why, AuthorityUnreachable):
        return "the fencing authority cannot be reached; nothing was sent"
    # the resource itself is not named: its text may carry argument values
    return f"a fencing resource is held by another live dispatch ({who}); nothing was sent"


def _holders_params(waiting: Sequence[tuple[Claim, FenceBusy]]) -> dict[str, list[Any]]:
    return {
        "dispatch_ids": [claim.dispatch_id for claim, _ in waiting],
        "attempts": [claim.attempt for claim, _ in waiting],
        "lease_tokens": [claim.lease_token for claim, _ in waiting],
    }


def _both(
    first: tuple[list[WriteAhead], list[Completion]],
    second: tuple[list[WriteAhead], list[Completion]],
) -> tuple[list[WriteAhead], list[Completion]]:
    return first[0] + second[0], first[1] + second[1]


def _note_failed(size: int, error: Exception) -> None:
    if size > 1:
        log.warning(
            "write-ahead of %d claims failed (%s); splitting the batch to isolate it",
            size,
            failure_name(error),
        )


def _holder_name(row: Mapping[str, Any] | None) -> str:
    if row is None:  # a provider that keeps no lease rows (in-memory)
        return "holder not recorded"
    if row["saga_id"] is None:  # the holder's saga was pruned meanwhile
        return f"dispatch {row['holder_dispatch_id']}"
    return (
        f"dispatch {row['holder_dispatch_id']} of saga {row['saga_id']}, "
        f"lease owner {row['lease_owner']}"
    )


def grants_json(grants: Iterable[tuple[str, int]]) -> str:
    return canonical_text([{"resource": r, "token": t} for r, t in sorted(grants)])

"""After an operator action on a saga committed (``resolve``, ``retry``, ``cancel``,
``adopt-contract``, from the command line or the console): give back on the fencing
authority (``[fencing] url``) the leases the saga's dispatches hold there from claims that
have ended. A store's own leases are given back in the transaction that records the claim's
outcome; the authority's after it, and one left there (the authority unreachable then, the
daemon killed) would run out only after the dispatch lease plus ``SKEW_MARGIN``: a dispatch
sent again would wait on its own dead claim until then.

A lease is given back only if its claim has ended: read on the authority first, then the
dispatch's row in the store, and kept while that row is in flight under the lease's token.
A grant follows its claim's commit, so a claim still running is always seen so; a claim made
after the read has a token of its own, never one read here. An authority that cannot be
reached is only said: its leases run out by themselves, and the action stands.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from effectusd.backends import Backend
from effectusd.backends.errors import DATABASE_ERRORS, failure_name
from effectusd.backends.operation import Operation
from effectusd.core.states import DispatchState
from effectusd.fencing.authority import authority_backend
from effectusd.fencing.store import StoreFencing

log = logging.getLogger("effectusd.operator")

Holders = list[tuple[int, str]]
# What keeps the leases from being given back now (the authority or the store down, a schema
# not there): said, never raised, since the action has committed.
NOT_ASKED: tuple[type[BaseException], ...] = (*DATABASE_ERRORS, TimeoutError)


def saga_leases(label: str | None, saga_id: str) -> Operation[Holders]:
    """On the authority: the (dispatch_id, lease_token) holders of the saga's leases."""
    rows = yield ("select_saga_leases", {"store": label, "saga_id": saga_id})
    return [(int(row["dispatch_id"]), str(row["lease_token"])) for row in rows]


def ended(holders: Sequence[tuple[int, str]]) -> Operation[Holders]:
    """In the store: those of ``holders`` whose claim has ended (their dispatch is not in
    flight under that lease token now)."""
    if not holders:
        return []
    rows = yield ("select_dispatch_leases", {"dispatch_ids": sorted({d for d, _ in holders})})
    running = {
        (int(row["dispatch_id"]), str(row["lease_token"]))
        for row in rows
        if row["state"] == DispatchState.IN_FLIGHT.value and row["lease_token"] is not None
    }
    return [holder for holder in holders if holder not in running]


def release_ended_leases(
    authority_url: str, store: Backend, label: str | None, saga_id: str
) -> str | None:
    """Give back on the authority the saga's leases whose claims have ended: None when done,
    else why they could not be (the error's class and SQLSTATE, never a URL)."""
    authority = authority_backend(authority_url)
    try:
        with authority.runner.connect() as conn:
            holders = authority.runner.run(conn, saga_leases(label, saga_id))
            if not holders:
                return None
            with store.runner.connect() as store_conn:
                dead = store.runner.run(store_conn, ended(holders))
            if dead:
                authority.runner.run(conn, StoreFencing().release(dead))
    except NOT_ASKED as exc:
        why = failure_name(exc)
        log.warning(
            "the fencing authority could not be asked (%s) after an operator action on saga %s: "
            "the leases its ended claims hold there run out by themselves",
            why,
            saga_id,
        )
        return why
    return None

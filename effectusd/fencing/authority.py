"""The fencing authority of several stores (``[fencing] url``): one PostgreSQL database that
issues every store's fencing tokens, so a resource's tokens rise across all of them.

Two databases mean no shared transaction, so the order is: grant (on the authority: a lease on
each resource in sorted order and the next token, committed there) → write-ahead (in the store:
``sent_at`` and the grants, as with the store's own tokens) → send → record (in the store) →
release (on the authority). Leases expire on the authority's clock, after the dispatch lease
plus ``SKEW_MARGIN``. Its counters start above every token the stores issued: ``carry`` raises
them to a store's counters (``effectusd migrate`` for every listed store, and each daemon for
its own store before its first grant), and every grant is also above the authority's clock
floor (the stores' layout, migration 10023). A store's counters keep the highest token the
authority granted it, so an authority restored from an older backup is carried above them
again. docs/design.md section 8.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Any

from effectusd.backends import Backend, Session, backend_for
from effectusd.backends.errors import TRANSIENT_ERRORS, UNAVAILABLE, failure_name
from effectusd.backends.migrations import MigrationError, MigrationSet
from effectusd.backends.operation import Operation, single, without_queries
from effectusd.backends.statements import Statements
from effectusd.core.states import FencingGuarantee, FencingStatus
from effectusd.core.templates import STORE_PLACEHOLDER
from effectusd.fencing.protocol import (
    AuthorityUnreachable,
    FenceBusy,
    FenceHolder,
    FencingProvider,
    Grants,
    InStore,
    Wanted,
)
from effectusd.fencing.store import StoreFencing

log = logging.getLogger("effectusd.fencing")

AUTHORITY_STATEMENTS = Statements("effectusd", "sql/postgres/authority")
# How much longer a lease lasts on the authority than the dispatch lease it fences: room for
# the store's clock, the daemon host's and the authority's to disagree.
SKEW_MARGIN = timedelta(seconds=10)
# The longest a grant or a release waits for the authority before it counts as unreachable.
AUTHORITY_TIMEOUT_S = 5.0
PING_TIMEOUT_S = 0.5  # /readyz asking an authority that was unreachable whether it is back
UNREACHABLE = "the fencing authority, unreachable"
Counters = Sequence[tuple[str, int]]
# A connection that failed or timed out: the authority cannot be asked now (any other error is
# the authority refusing one grant).
UNREACHABLE_ERRORS: tuple[type[BaseException], ...] = (*TRANSIENT_ERRORS, TimeoutError)
Taken = dict[tuple[int, str], "Grants | Exception"]


def _folder() -> Traversable:
    return files("effectusd") / "schema" / "authority"


AUTHORITY_MIGRATIONS = MigrationSet(
    folder=_folder,
    statements=AUTHORITY_STATEMENTS,
    table="effectus_authority_migrations",
    create="migrations_create_table",
    applied="migrations_applied",
    record="migrations_record",
    exists="migrations_table_exists",
    lock="migrations_lock",
    label="fencing authority migration",
)


def authority_backend(url: str) -> Backend:
    """The backend of the authority's database (PostgreSQL: the configuration refuses any
    other), serving the authority's schema and statements."""
    return backend_for(url, {"postgresql": AUTHORITY_MIGRATIONS})


def store_resource(resource: str, label: str | None) -> str:
    """The name a resource has on the authority: ``{store}`` in it (a per-store template)
    becomes the store's label; a store without a label keeps it as written."""
    return resource if label is None else resource.replace(STORE_PLACEHOLDER, label)


def select_counters() -> Operation[list[tuple[str, int]]]:
    """A store's counters: every resource it granted and its last token."""
    rows = yield ("select_fencing_counters", {})
    return [(row["resource"], int(row["last_token"])) for row in rows]


def carry(counters: Counters, label: str | None) -> Operation[None]:
    """Raise the authority's counters to a store's (``counters``: its resources and last
    tokens), never lowering one: the authority then grants above every token the store issued."""
    named: dict[str, int] = {}
    for resource, token in counters:
        name = store_resource(resource, label)
        named[name] = max(named.get(name, 0), int(token))
    if named:
        ordered = sorted(named)
        yield (
            "raise_fence_counters",
            {"resources": ordered, "tokens": [named[name] for name in ordered]},
        )


class _AuthorityStatements(StoreFencing):
    """The store provider's operations, run on the authority: its ``acquire_fence`` sets the
    lease's expiry by the authority's clock and names the holder's store, saga and daemon."""

    def __init__(self, label: str | None, owner: str) -> None:
        self.label = label
        self.owner = owner

    def _acquire_params(self, holder: FenceHolder, resource: str) -> dict[str, Any]:
        lease = holder.expires_at - datetime.now(UTC) + SKEW_MARGIN
        return {
            "resource": resource,
            "dispatch_id": holder.dispatch_id,
            "lease_token": holder.lease_token,
            "lease_s": max(lease, SKEW_MARGIN).total_seconds(),
            "store": self.label,
            "saga_id": holder.saga_id,
            "owner": self.owner,
        }


class AuthorityFencing(InStore):
    """The provider of a daemon whose configuration names ``[fencing] url``. ``own_counters``
    reads the daemon's store's counters, carried into the authority before its first grant."""

    guarantee = FencingGuarantee.DURABLE_MONOTONIC

    def __init__(
        self,
        backend: Backend,
        label: str | None,
        owner: str,
        own_counters: Callable[[], Awaitable[Counters]] | None = None,
    ) -> None:
        self.backend = backend
        self.label = label
        self.operations = _AuthorityStatements(label, owner)
        self.own_counters = own_counters
        self.session: Session | None = None
        self.opening: asyncio.Task[Session] | None = None
        self.releasing: set[asyncio.Task[None]] = set()
        self.unreachable_since: float | None = None  # time.monotonic() of the first failure

    @property
    def status(self) -> FencingStatus:
        return FencingStatus.PROPAGATED

    async def grant(self, wanted: Wanted) -> FencingProvider:
        """Take this batch's tokens on the authority, in one transaction there; the provider
        returned hands them out in the store's write-ahead. Unreachable: every claim of the
        batch waits (``AuthorityUnreachable``), and nothing is sent."""
        # at most half the shortest dispatch lease left: a claim must still be sent (or
        # settled unsent) in its own lease
        left = min(holder.expires_at for holder, _ in wanted) - datetime.now(UTC)
        bound = max(PING_TIMEOUT_S, min(AUTHORITY_TIMEOUT_S, left.total_seconds() / 2))
        try:
            async with asyncio.timeout(bound):
                session = await self._session()
                try:
                    taken = await session.write(self._grant(wanted))
                except UNREACHABLE_ERRORS:
                    raise
                except Exception:  # noqa: BLE001 - a grant the authority refused: find whose
                    taken = await self._grant_alone(session, wanted)
        except UNREACHABLE_ERRORS as exc:
            self._unreachable(exc)
            gone = AuthorityUnreachable("", UNREACHABLE)
            return _Granted({_key(holder): gone for holder, _ in wanted}, self.status)
        self._reachable()
        return _Granted(taken, self.status)

    async def _grant_alone(self, session: Session, wanted: Wanted) -> Taken:
        """Each holder's grant in a transaction of its own: the one the authority refuses
        (an error of its own, never a connection's) carries that error into the store's
        write-ahead, which settles that claim alone as a failed write-ahead."""
        taken: Taken = {}
        for holder, resources in wanted:
            try:
                taken.update(await session.write(self._grant([(holder, resources)])))
            except UNREACHABLE_ERRORS:
                raise
            except Exception as refused:  # noqa: BLE001 - settled by that claim alone
                taken[_key(holder)] = refused
        return taken

    async def released(self, holders: Sequence[tuple[int, str]]) -> None:
        """Give back on the authority what ``holders`` took, after their outcomes were
        recorded: in the background, so that the recorder never waits for the authority; if
        it cannot be reached, their leases there run out by themselves."""
        if holders:
            task = asyncio.create_task(self._release(list(holders)))
            self.releasing.add(task)
            task.add_done_callback(self.releasing.discard)

    async def _release(self, holders: Sequence[tuple[int, str]]) -> None:
        try:
            async with asyncio.timeout(AUTHORITY_TIMEOUT_S):
                session = await self._session()
                await session.write(self.operations.release(holders))
        except UNREACHABLE_ERRORS as exc:
            self._unreachable(exc)

    async def readiness(self) -> tuple[bool, str]:
        """Reachable until a grant or release could not reach it; then asked again on each
        look (a daemon with no fenced work left would otherwise never see it come back)."""
        if self.unreachable_since is not None:
            try:
                async with asyncio.timeout(PING_TIMEOUT_S):
                    await (await self._session()).read(single("health_ping", {}))
            except UNREACHABLE_ERRORS:
                down = time.monotonic() - self.unreachable_since
                return False, (
                    f"unreachable for {down:.0f}s: fenced dispatches wait, nothing fenced is sent"
                )
            self._reachable()
        return True, "reachable"

    async def close(self) -> None:
        await asyncio.gather(*self.releasing, return_exceptions=True)  # each bounded
        if self.opening is not None and not self.opening.done():
            self.opening.cancel()
        if self.opening is not None:
            await asyncio.gather(self.opening, return_exceptions=True)
        if self.session is not None:
            await self.session.close()

    # The store provider's transactional part does nothing: the tokens were taken by ``grant``.
    def lock(self, resources: Sequence[str]) -> Operation[None]:
        return without_queries(None)

    def acquire(self, holder: FenceHolder, resources: Sequence[str]) -> Operation[Grants]:
        raise RuntimeError("AuthorityFencing hands out tokens through the provider grant returns")

    def release(self, holders: Sequence[tuple[int, str]]) -> Operation[None]:
        return without_queries(None)  # after the record commits: ``released``

    async def _session(self) -> Session:
        """The authority's pool, opened on first use (a daemon starts while the authority is
        down: its unfenced work goes on), its store's counters carried in first. The opening
        runs on by itself: a grant that stops waiting for it leaves it to finish or fail."""
        if self.session is None:
            if self.opening is None or (self.opening.done() and self.opening.exception()):
                self.opening = asyncio.create_task(self._open())
            self.session = await asyncio.shield(self.opening)
        return self.session

    async def _open(self) -> Session:
        session = await self.backend.runner.open_session(1, 4)
        if self.own_counters is not None:
            try:
                await session.write(carry(await self.own_counters(), self.label))
            except BaseException:
                await session.close()
                raise
        return session

    def _grant(self, wanted: Wanted) -> Operation[Taken]:
        named = {
            _key(holder): sorted({store_resource(r, self.label) for r in resources})
            for holder, resources in wanted
        }
        yield from self.operations.lock([r for names in named.values() for r in names])
        taken: Taken = {}
        for holder, _ in wanted:
            try:
                taken[_key(holder)] = yield from self.operations.acquire(
                    holder, named[_key(holder)]
                )
            except FenceBusy as busy:
                rows = yield ("select_fence_holders", {"resources": [busy.resource]})
                taken[_key(holder)] = FenceBusy(busy.resource, _holder_name(rows))
        return taken

    def _reachable(self) -> None:
        if self.unreachable_since is not None:
            log.info("the fencing authority answers again")
        self.unreachable_since = None

    def _unreachable(self, error: BaseException) -> None:
        if self.unreachable_since is None:
            self.unreachable_since = time.monotonic()
            log.warning(
                "the fencing authority cannot be reached (%s): fenced dispatches wait",
                failure_name(error),
            )


class _Granted(InStore):
    """One batch's tokens, taken on the authority, handed out inside the store's write-ahead:
    the grants are recorded there as the store's own would be, and the store's counters keep
    the highest token of each resource."""

    guarantee = FencingGuarantee.DURABLE_MONOTONIC

    def __init__(
        self, taken: Mapping[tuple[int, str], Grants | Exception], status: FencingStatus
    ) -> None:
        self.taken = taken
        self._status = status

    @property
    def status(self) -> FencingStatus:
        return self._status

    def lock(self, resources: Sequence[str]) -> Operation[None]:
        return without_queries(None)

    def acquire(self, holder: FenceHolder, resources: Sequence[str]) -> Operation[Grants]:
        """The holder's grants, each kept in the store's counter (its highest token from the
        authority, for ``carry`` after a restore); FenceBusy if the resource is held (or the
        authority unreachable), the authority's error if it refused the grant."""
        outcome = self.taken[_key(holder)]
        if isinstance(outcome, Exception):  # busy, unreachable, or refused by the authority
            raise outcome
        # No lock order is needed for these rows: the authority's leases keep two batches
        # from holding grants for one resource at the same time.
        for resource, token in outcome:
            yield ("keep_fence_token", {"resource": resource, "token": token})
        return outcome

    def release(self, holders: Sequence[tuple[int, str]]) -> Operation[None]:
        return without_queries(None)


def _key(holder: FenceHolder) -> tuple[int, str]:
    return holder.dispatch_id, holder.lease_token


def _holder_name(rows: Sequence[Mapping[str, Any]]) -> str:
    if not rows:  # released meanwhile
        return "a holder that has just released it"
    row = rows[0]
    store = f"store {row['holder_store']!r}" if row["holder_store"] else "the store"
    return (
        f"dispatch {row['holder_dispatch_id']} of saga {row['saga_id']} in {store}, "
        f"lease owner {row['lease_owner']}"
    )


def authority_current(url: str) -> None:
    """Refuse to start on an authority whose schema this code does not match; one that
    cannot be reached now is only logged (fenced dispatches wait for it)."""
    backend = authority_backend(url)
    try:
        with backend.runner.connect() as conn:
            backend.migrator.require_current(conn)
    except MigrationError as exc:
        raise type(exc)(f"fencing authority: {exc}") from None
    except UNAVAILABLE as exc:
        log.warning(
            "the fencing authority cannot be reached (%s): fenced dispatches wait for it",
            failure_name(exc),
        )


def open_authority(
    url: str,
    label: str | None,
    owner: str,
    own_counters: Callable[[], Awaitable[Counters]] | None = None,
) -> AuthorityFencing:
    return AuthorityFencing(authority_backend(url), label, owner, own_counters)

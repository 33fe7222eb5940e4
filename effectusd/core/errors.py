"""The one base class of every error effectusd itself raises to a caller.

Errors of the database driver on the caller's own connection (``psycopg.Error``,
``sqlite3.Error``) pass through unchanged: in the outbox pattern the caller's transaction
handling must see them exactly as it would without effectusd.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from effectusd.core.views import SagaView


class EffectusError(Exception):
    """Base of everything effectusd raises on purpose; catch it to catch them all."""


class PlanError(EffectusError, ValueError):
    """The plan (or the facts given for it) cannot be used; nothing was written."""


class SchemaNotReady(EffectusError):
    """The database has no effectusd schema, or an older one: run ``effectusd migrate``."""


class WrongConnection(EffectusError, TypeError):
    """A connection or pool of another store (or the sync/async kind the client cannot use)."""


class SagaNotFound(EffectusError, LookupError):
    """No saga has this id (``Client.wait``); it may have been pruned."""


class AmbiguousSaga(EffectusError, LookupError):
    """A saga-id prefix (or an execution id without its plan) names more than one saga;
    ``matches`` holds some of their ids, ``candidates`` their rows (saga_id, state, plan_id,
    execution_id): give more of the id, or the plan id."""

    def __init__(self, name: str, candidates: Sequence[Mapping[str, Any]], *, more: bool) -> None:
        self.name = name
        self.candidates = list(candidates)
        self.matches = [str(row["saga_id"]) for row in self.candidates]
        self.more = more
        also = " (and more)" if more else ""
        super().__init__(
            f"{name} is ambiguous: {len(self.matches)} sagas match{also}: "
            + ", ".join(self.matches)
        )


class WaitTimeout(EffectusError, TimeoutError):
    """``wait`` gave up: the saga is not yet where ``until`` asks (``view`` is where it is)."""

    def __init__(self, message: str, view: SagaView | None = None) -> None:
        super().__init__(message)
        self.view = view


class WaitUnreachable(WaitTimeout):
    """``wait`` gave up at once: the saga finished in a state ``until`` does not name, and a
    finished saga never moves again (``view`` is where it finished)."""

"""The one base class of every error effectusd itself raises to a caller.

Errors of the database driver on the caller's own connection (``psycopg.Error``,
``sqlite3.Error``) pass through unchanged: in the outbox pattern the caller's transaction
handling must see them exactly as it would without effectusd.
"""

from __future__ import annotations


class EffectusError(Exception):
    """Base of everything effectusd raises on purpose; catch it to catch them all."""


class SchemaNotReady(EffectusError):
    """The database has no effectusd schema, or an older one: run ``effectusd migrate``."""


class WrongConnection(EffectusError, TypeError):
    """A connection of another store (or the sync/async kind the client cannot use)."""


class SagaNotFound(EffectusError, LookupError):
    """No saga has this id (``Client.wait``); it may have been pruned."""


class WaitTimeout(EffectusError, TimeoutError):
    """``Client.wait`` gave up: the saga is still running."""

"""How a command names a saga: SAGA_ID, the full id or the unique start of it that `sagas
list` prints; one resolution (``effectusd.store.operations.locate_saga``) behind every command
that takes one, and one answer when the start fits several sagas."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NoReturn

import click

from effectusd.cli.app import EXIT_USAGE, fail
from effectusd.core.errors import AmbiguousSaga
from effectusd.core.identity import saga_id_prefix


def saga_id_argument(*, required: bool = True) -> Callable[[Any], Any]:
    """SAGA_ID of every command that takes one: the full id or a unique start of it, as
    `sagas list` prints it (``c0ae75b9ed3c…``); not hex digits is a usage error (exit 2)."""
    return click.argument("saga_id", required=required, callback=_saga_id_prefix)


def _saga_id_prefix(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    prefix = saga_id_prefix(value)
    if prefix is None:
        raise click.BadParameter("a saga id or a prefix of one (hex digits)", ctx, param)
    return prefix


MORE_OF_THE_ID = "give more of the saga id"


def fail_ambiguous(exc: AmbiguousSaga, hint: str = MORE_OF_THE_ID) -> NoReturn:
    """Exit 2 naming the sagas a prefix (or an execution id without its plan) fits."""
    more = " (and more)" if exc.more else ""
    fail(
        f"{exc.name} is ambiguous: {len(exc.candidates)} sagas match{more}; name one "
        f"({hint}):\n" + "\n".join(_line(row) for row in exc.candidates),
        EXIT_USAGE,
    )


def _line(row: Mapping[str, Any]) -> str:
    return f"  {row['saga_id']}  {row['state']:22} {row['plan_id']}/{row['execution_id']}"

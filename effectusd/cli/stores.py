"""Commands over several stores (``[database.stores]``, docs/operations.md section 10): each
store in turn, named by its label (never its URL); a store that cannot be reached is named,
and the others are still served."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeVar

import click

from effectusd.backends.operation import Operation
from effectusd.cli.app import EXIT_FAILURE, EXIT_USAGE, Context, StoreContext, emit, fail
from effectusd.store.across import Unreached, ambiguous_text, each_store, unsearched_text

T = TypeVar("T")


def store_option(
    help: str = "Only the store of [database.stores] with this label (default: every store).",
) -> Callable[[Any], Any]:
    """--store LABEL (the ``store_label`` parameter): one store of [database.stores]."""
    return click.option("--store", "store_label", metavar="LABEL", help=help)


def run_in(store: StoreContext, operation: Operation[T]) -> T:
    """``operation`` in one transaction on a connection of its own to ``store``."""
    with store.open() as conn:
        return store.backend.runner.run(conn, operation)


def warn(unreached: Sequence[Unreached[StoreContext]], what: str) -> None:
    """One line on stderr for each store that ``what`` (read, searched, …) did not reach."""
    for each in unreached:
        click.echo(f"warning: {each.line(what)}", err=True)


def holder(
    obj: Context,
    name: str,
    search: Callable[[StoreContext], Operation[Any]],
    as_json: bool = False,
) -> StoreContext | None:
    """The store that holds the saga ``name`` names (``search`` finds it in one store: rows of
    candidates); with one store, that store without a search, as ever. None when no store
    holds it and every store was searched; a name that fits sagas in several stores exits 2
    naming each with its label; a store that could not be searched, when no other holds the
    saga, exits 1 naming it (the saga may be there)."""
    stores = obj.stores()
    if len(stores) == 1:
        return stores[0]
    found, unreached = each_store(stores, lambda store: run_in(store, search(store)))
    holders = [(store, rows) for store, rows in found if rows]
    if len(holders) > 1:
        hint = "give more of the saga id, or --store LABEL"
        refuse(ambiguous_text(name, holders, hint), "ambiguous", EXIT_USAGE, as_json)
    if holders:
        return holders[0][0]
    if unreached:
        refuse(unsearched_text(name, found, unreached), "unreached", EXIT_FAILURE, as_json)
    return None


def emit_by_store(
    done: Sequence[tuple[StoreContext, Any]],
    unreached: Sequence[Unreached[StoreContext]],
    as_json: bool,
) -> None:
    """Each store's report (``as_dict()`` and ``summary()``) under its label: in --json one
    document, ``stores`` by label and ``unreached`` (label: error) beside them."""
    reports = {str(store.label): report for store, report in done}
    data = {
        "ok": not unreached
        and all(report.as_dict().get("ok", True) for report in reports.values()),
        "stores": {label: report.as_dict() for label, report in reports.items()},
        "unreached": {str(each.store.label): each.error for each in unreached},
    }
    emit(
        data,
        as_json,
        lambda _: "\n".join(
            f"store {label}:\n" + textwrap.indent(report.summary(), "  ")
            for label, report in reports.items()
        ),
    )


def refuse(message: str, kind: str, code: int, as_json: bool) -> NoReturn:
    """Exit ``code`` with ``message``; with --json, the operator commands' refusal document
    first."""
    if as_json:
        emit({"ok": False, "refused": kind, "error": message}, True, str)
    fail(message, code)

"""Reading sagas: sagas list, sagas show."""

from __future__ import annotations

import sys
from datetime import timedelta
from typing import Any, NoReturn

import click

from effectusd.backends import Connection
from effectusd.backends.operation import Operation, Rows
from effectusd.cli import render
from effectusd.cli.app import (
    EXIT_FAILURE,
    EXIT_NOT_FOUND,
    Context,
    Duration,
    StoreContext,
    emit,
    fail,
    json_option,
    main,
)
from effectusd.cli.naming import MORE_OF_THE_ID, fail_ambiguous, saga_id_argument
from effectusd.cli.stores import holder, store_option, warn
from effectusd.core.errors import AmbiguousSaga
from effectusd.core.identity import SAGA_ID_CHARS
from effectusd.core.states import BLOCKED_SAGA_STATES, SagaState
from effectusd.core.views import SagaSummary, StoredSagaSummary
from effectusd.store import operations
from effectusd.store.across import each_store


@main.group()
def sagas() -> None:
    """Inspect sagas."""


class _StateChoice(click.Choice):  # type: ignore[type-arg]
    """--state: one saga state; "blocked" is every blocked state, which --blocked lists."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value == "blocked":
            self.fail(
                "'blocked' is not one state: --blocked lists every blocked state ("
                + ", ".join(sorted(BLOCKED_SAGA_STATES))
                + ")",
                param,
                ctx,
            )
        return super().convert(value, param, ctx)


@sagas.command("list")
@click.option("--state", type=_StateChoice([s.value for s in SagaState]), help="Only this state.")
@click.option(
    "--blocked", is_flag=True, help="Only blocked sagas, in any blocked_* state (not with --state)."
)
@click.option("--plan", "plan_id", help="Only this plan id.")
@click.option(
    "--older-than", type=Duration(), help="Only sagas created longer ago than this (e.g. 1h, 7d)."
)
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 100_000))
@store_option()
@json_option
@click.pass_obj
def sagas_list(
    obj: Context,
    state: str | None,
    blocked: bool,
    plan_id: str | None,
    older_than: timedelta | None,
    limit: int,
    store_label: str | None,
    as_json: bool,
) -> None:
    """List sagas, newest first (across every store, each with its label: --store for one)."""
    if blocked and state is not None:
        raise click.UsageError("--blocked and --state: give one of them")
    stores = obj.stores(store_label)

    def read(store: StoreContext) -> list[SagaSummary]:
        return store.client().list(
            state=state,
            plan_id=plan_id,
            limit=limit,
            older_than=older_than,
            states=BLOCKED_SAGA_STATES if blocked else None,
        )

    if len(stores) == 1 and stores[0].label is None:
        emit(read(stores[0]), as_json, render.saga_list)
        return
    found, unreached = each_store(stores, read)
    rows = [
        StoredSagaSummary(**row.model_dump(), store=str(store.label))
        for store, summaries in found
        for row in summaries
    ]
    rows.sort(key=lambda row: (row.created_at, row.saga_id), reverse=True)
    emit(rows[:limit], as_json, render.saga_list)
    warn(unreached, "read")
    if unreached:
        sys.exit(EXIT_FAILURE)


@sagas.command("show")
@saga_id_argument(required=False)
@click.option(
    "--execution-id",
    help="Name the saga by its execution id instead (in the configured namespace).",
)
@click.option("--plan", "plan_id", help="With --execution-id: the saga of this plan.")
@store_option()
@json_option
@click.pass_obj
def sagas_show(
    obj: Context,
    saga_id: str | None,
    execution_id: str | None,
    plan_id: str | None,
    store_label: str | None,
    as_json: bool,
) -> None:
    """Show one saga: steps, dispatches, attempts (with their errors) and its timeline.

    SAGA_ID may be the full id or a unique prefix of it (as `sagas list` prints it);
    `--execution-id ID [--plan PLAN_ID]` names it by what you submitted instead. With several
    stores, the saga is found in whichever holds it (--store: only there).
    """
    if (saga_id is None) == (execution_id is None):
        raise click.UsageError("name the saga by SAGA_ID (or a prefix) or by --execution-id")
    if plan_id is not None and execution_id is None:
        raise click.UsageError("--plan goes with --execution-id")
    obj.selected = store_label

    def search(store: StoreContext) -> Operation[Rows]:
        if saga_id is not None:
            return operations.find_sagas(prefix=saga_id)
        namespace = store.config.namespace
        return operations.find_sagas(
            namespace=namespace, execution_id=execution_id, plan_id=plan_id
        )

    name = f"saga id prefix {saga_id}" if saga_id else f"execution id {execution_id!r}"
    store = holder(obj, name, search)
    if store is None:
        _not_found(obj.stores(), saga_id, _missing(saga_id, execution_id, plan_id, None))
    with store.connect() as conn:
        found = _find(store, conn, saga_id, execution_id, plan_id)
        view = (
            None if found is None else store.backend.runner.run(conn, operations.load_saga(found))
        )
    if view is None:
        missing = _missing(saga_id, execution_id, plan_id, store.config.namespace)
        _not_found([store], found, missing)
    if store.label is None:
        emit(view, as_json, render.saga_detail)
    else:  # several stores: the text says which one holds it (the JSON is the saga's view)
        emit(view, as_json, lambda shown: f"store      {store.label}\n{render.saga_detail(shown)}")


def _missing(
    saga_id: str | None, execution_id: str | None, plan_id: str | None, namespace: str | None
) -> str:
    """What to say when no saga has the name (``namespace`` None: no store holds it)."""
    if saga_id is not None:
        whole = len(saga_id) == SAGA_ID_CHARS
        return f"saga {saga_id} not found" if whole else f"no saga id starts with {saga_id}"
    plan = f" and plan {plan_id!r}" if plan_id else ""
    where = "in any store" if namespace is None else f"in namespace {namespace!r}"
    return f"no saga with execution id {execution_id!r}{plan} {where}"


def _find(
    store: StoreContext,
    conn: Connection,
    saga_id: str | None,
    execution_id: str | None,
    plan_id: str | None,
) -> str | None:
    """The one saga id the arguments name in ``store`` (it may not exist: a full id, or an
    execution id with its plan), None if none can match; exits 2 if several match."""
    operation = operations.locate_saga(
        saga_id, namespace=store.config.namespace, execution_id=execution_id, plan_id=plan_id
    )
    try:
        return store.backend.runner.run(conn, operation)
    except AmbiguousSaga as exc:
        fail_ambiguous(exc, MORE_OF_THE_ID if saga_id else "add --plan PLAN_ID to --execution-id")


def _not_found(stores: list[StoreContext], saga_id: str | None, missing: str) -> NoReturn:
    """Exit 5; for a pruned saga (its tombstone in one of ``stores``), say when it finished
    and when it was pruned."""
    for store in stores if saga_id is not None and len(saga_id) == SAGA_ID_CHARS else []:
        with store.connect() as conn:
            rows = store.backend.runner.run(conn, operations.saga_identity(str(saga_id)))
        for row in rows:
            if row["pruned_at"] is not None:
                finished = row["finished_at"].isoformat() if row["finished_at"] else "-"
                fail(
                    f"saga {saga_id} was pruned at {row['pruned_at'].isoformat()} (it finished "
                    f"{row['state']} at {finished}); only its tombstone is left",
                    EXIT_NOT_FOUND,
                )
    fail(missing, EXIT_NOT_FOUND)

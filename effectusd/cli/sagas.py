"""Reading sagas: sagas list, sagas show."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, NoReturn

import click

from effectusd.backends import Connection
from effectusd.cli import render
from effectusd.cli.app import (
    EXIT_NOT_FOUND,
    Context,
    Duration,
    emit,
    fail,
    json_option,
    main,
)
from effectusd.cli.naming import MORE_OF_THE_ID, fail_ambiguous, saga_id_argument
from effectusd.core.errors import AmbiguousSaga
from effectusd.core.identity import SAGA_ID_CHARS
from effectusd.core.states import BLOCKED_SAGA_STATES, SagaState
from effectusd.store import operations


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
@json_option
@click.pass_obj
def sagas_list(
    obj: Context,
    state: str | None,
    blocked: bool,
    plan_id: str | None,
    older_than: timedelta | None,
    limit: int,
    as_json: bool,
) -> None:
    """List sagas, newest first."""
    if blocked and state is not None:
        raise click.UsageError("--blocked and --state: give one of them")
    rows = obj.client().list(
        state=state,
        plan_id=plan_id,
        limit=limit,
        older_than=older_than,
        states=BLOCKED_SAGA_STATES if blocked else None,
    )
    emit(rows, as_json, render.saga_list)


@sagas.command("show")
@saga_id_argument(required=False)
@click.option(
    "--execution-id",
    help="Name the saga by its execution id instead (in the configured namespace).",
)
@click.option("--plan", "plan_id", help="With --execution-id: the saga of this plan.")
@json_option
@click.pass_obj
def sagas_show(
    obj: Context,
    saga_id: str | None,
    execution_id: str | None,
    plan_id: str | None,
    as_json: bool,
) -> None:
    """Show one saga: steps, dispatches, attempts (with their errors) and its timeline.

    SAGA_ID may be the full id or a unique prefix of it (as `sagas list` prints it);
    `--execution-id ID [--plan PLAN_ID]` names it by what you submitted instead.
    """
    if (saga_id is None) == (execution_id is None):
        raise click.UsageError("name the saga by SAGA_ID (or a prefix) or by --execution-id")
    if plan_id is not None and execution_id is None:
        raise click.UsageError("--plan goes with --execution-id")
    with obj.connect() as conn:
        found, missing = _find(obj, conn, saga_id, execution_id, plan_id)
        view = None if found is None else obj.backend.runner.run(conn, operations.load_saga(found))
        if view is None:
            _not_found(obj, conn, found, missing)
    emit(view, as_json, render.saga_detail)


def _find(
    obj: Context,
    conn: Connection,
    saga_id: str | None,
    execution_id: str | None,
    plan_id: str | None,
) -> tuple[str | None, str]:
    """The one saga id the arguments name (it may not exist: a full id, or an execution id
    with its plan), None if none can match, and what to say if it does not; exits 2 if
    several match."""
    namespace = obj.config.namespace
    if saga_id is not None:
        whole = len(saga_id) == SAGA_ID_CHARS
        missing = f"saga {saga_id} not found" if whole else f"no saga id starts with {saga_id}"
    else:
        plan = f" and plan {plan_id!r}" if plan_id else ""
        missing = f"no saga with execution id {execution_id!r}{plan} in namespace {namespace!r}"
    operation = operations.locate_saga(
        saga_id, namespace=namespace, execution_id=execution_id, plan_id=plan_id
    )
    try:
        return obj.backend.runner.run(conn, operation), missing
    except AmbiguousSaga as exc:
        fail_ambiguous(exc, MORE_OF_THE_ID if saga_id else "add --plan PLAN_ID to --execution-id")


def _not_found(obj: Context, conn: Connection, saga_id: str | None, missing: str) -> NoReturn:
    """Exit 5; for a pruned saga, say when it finished and when it was pruned."""
    identity = operations.saga_identity
    rows = [] if saga_id is None else obj.backend.runner.run(conn, identity(saga_id))
    for row in rows:
        if row["pruned_at"] is not None:
            finished = row["finished_at"].isoformat() if row["finished_at"] else "-"
            fail(
                f"saga {saga_id} was pruned at {row['pruned_at'].isoformat()} (it finished "
                f"{row['state']} at {finished}); only its tombstone is left",
                EXIT_NOT_FOUND,
            )
    fail(missing, EXIT_NOT_FOUND)

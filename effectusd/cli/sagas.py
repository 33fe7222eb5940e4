"""Reading sagas: sagas list, sagas show."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any, NoReturn

import click

from effectusd.backends import Connection
from effectusd.cli import render
from effectusd.cli.app import (
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    Context,
    Duration,
    emit,
    fail,
    json_option,
    main,
)
from effectusd.core.identity import saga_id as derive_saga_id
from effectusd.core.states import SagaState
from effectusd.store import operations

SAGA_ID_LENGTH = 64
HEX = re.compile(r"[0-9a-f]+")


@main.group()
def sagas() -> None:
    """Inspect sagas."""


@sagas.command("list")
@click.option("--state", type=click.Choice([s.value for s in SagaState]), help="Only this state.")
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
    plan_id: str | None,
    older_than: timedelta | None,
    limit: int,
    as_json: bool,
) -> None:
    """List sagas, newest first."""
    rows = obj.client().list(state=state, plan_id=plan_id, limit=limit, older_than=older_than)
    emit(rows, as_json, render.saga_list)


@sagas.command("show")
@click.argument("saga_id", required=False)
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
        view = obj.backend.runner.run(conn, operations.load_saga(found))
        if view is None:
            _not_found(obj, conn, found, missing)
    emit(view, as_json, render.saga_detail)


def _find(
    obj: Context,
    conn: Connection,
    saga_id: str | None,
    execution_id: str | None,
    plan_id: str | None,
) -> tuple[str, str]:
    """The one saga id the arguments name (it may not exist: a full id, or an execution id
    with its plan) and what to say if it does not; exits 5 if nothing matches, 2 if several."""
    if saga_id is not None:
        prefix = saga_id.strip().rstrip("….").lower()
        if not HEX.fullmatch(prefix) or len(prefix) > SAGA_ID_LENGTH:
            raise click.BadParameter(
                "a saga id or a prefix of one (hex digits)", param_hint="SAGA_ID"
            )
        if len(prefix) == SAGA_ID_LENGTH:
            return prefix, f"saga {prefix} not found"
        rows = obj.backend.runner.run(conn, operations.find_sagas(prefix=prefix))
        missing = f"no saga id starts with {prefix}"
        several = f"saga id prefix {prefix}"
    else:
        assert execution_id is not None
        namespace = obj.config.namespace
        plan = f" and plan {plan_id!r}" if plan_id else ""
        missing = f"no saga with execution id {execution_id!r}{plan} in namespace {namespace!r}"
        if plan_id is not None:
            return derive_saga_id(namespace, execution_id, plan_id), missing
        rows = obj.backend.runner.run(
            conn, operations.find_sagas(namespace=namespace, execution_id=execution_id)
        )
        several = f"execution id {execution_id!r}"
    if not rows:
        fail(missing, EXIT_NOT_FOUND)
    if len(rows) > 1:
        more = " (and more)" if len(rows) >= operations.FIND_LIMIT else ""
        fail(
            f"{several} is ambiguous: {len(rows)} sagas match{more}; name one (give more of "
            "the saga id, or add --plan PLAN_ID to --execution-id):\n"
            + "\n".join(_line(row) for row in rows),
            EXIT_USAGE,
        )
    return str(rows[0]["saga_id"]), missing


def _line(row: dict[str, Any]) -> str:
    return f"  {row['saga_id']}  {row['state']:22} {row['plan_id']}/{row['execution_id']}"


def _not_found(obj: Context, conn: Connection, saga_id: str, missing: str) -> NoReturn:
    """Exit 5; for a pruned saga, say when it finished and when it was pruned."""
    for row in obj.backend.runner.run(conn, operations.saga_identity(saga_id)):
        if row["pruned_at"] is not None:
            finished = row["finished_at"].isoformat() if row["finished_at"] else "-"
            fail(
                f"saga {saga_id} was pruned at {row['pruned_at'].isoformat()} (it finished "
                f"{row['state']} at {finished}); only its tombstone is left",
                EXIT_NOT_FOUND,
            )
    fail(missing, EXIT_NOT_FOUND)

"""Reading sagas: sagas list, sagas show."""

from __future__ import annotations

import click

from effectusd import render
from effectusd.cli.app import (
    EXIT_FAILURE,
    EXIT_INVALID,
    EXIT_NOT_FOUND,
    Context,
    emit,
    fail,
    json_option,
    main,
)
from effectusd.core.durations import parse_duration
from effectusd.core.states import SagaState
from effectusd.store import backends


@main.group()
def sagas() -> None:
    """Inspect sagas."""


@sagas.command("list")
@click.option("--state", type=click.Choice([s.value for s in SagaState]), help="Only this state.")
@click.option("--plan", "plan_id", help="Only this plan id.")
@click.option("--older-than", help="Only sagas created longer ago than this (e.g. 1h, 7d).")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 100_000))
@json_option
@click.pass_obj
def sagas_list(
    obj: Context,
    state: str | None,
    plan_id: str | None,
    older_than: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """List sagas, newest first."""
    try:
        age = parse_duration(older_than) if older_than else None
    except ValueError as exc:
        fail(f"--older-than: {exc}", EXIT_INVALID)
    try:
        rows = obj.client().list(state=state, plan_id=plan_id, limit=limit, older_than=age)
    except backends.UNAVAILABLE as exc:
        fail(f"database: {str(exc).strip()}", EXIT_FAILURE)
    from effectusd.core.views import jsonable

    emit(jsonable(rows), as_json, render.saga_list)


@sagas.command("show")
@click.argument("saga_id")
@json_option
@click.pass_obj
def sagas_show(obj: Context, saga_id: str, as_json: bool) -> None:
    """Show one saga: steps, dispatches, attempts and its timeline."""
    try:
        view = obj.client().get(saga_id)
    except backends.UNAVAILABLE as exc:
        fail(f"database: {str(exc).strip()}", EXIT_FAILURE)
    if view is None:
        fail(f"saga {saga_id} not found", EXIT_NOT_FOUND)
    emit(view, as_json, render.saga_detail)

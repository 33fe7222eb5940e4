"""The schema: migrate (and its --check for deploy scripts), on every configured store and the
fencing authority."""

from __future__ import annotations

import sys
from typing import Any

import click

from effectusd.backends.errors import UNAVAILABLE, unavailable_text
from effectusd.backends.migrations import MigrationError, MigrationStatus
from effectusd.cli.app import (
    EXIT_CONFLICT,
    EXIT_FAILURE,
    EXIT_INVALID,
    EXIT_PENDING,
    Context,
    StoreContext,
    emit,
    fail,
    json_option,
    main,
)
from effectusd.cli.stores import store_option
from effectusd.core.replication import ReadOnlyServer
from effectusd.fencing.authority import authority_backend, carry, select_counters


class Refusal(Exception):
    """A store's migrate (or --check) that did not succeed: its exit code and what it said."""

    def __init__(self, code: int, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


@main.command()
@click.option(
    "--check", "check_only", is_flag=True, help="Only report; exit 6 if anything is pending."
)
@store_option()
@json_option
@click.pass_obj
def migrate(obj: Context, check_only: bool, store_label: str | None, as_json: bool) -> None:
    """Apply pending schema migrations (one migrator at a time), on every configured store,
    and on the fencing authority ([fencing] url) if there is one."""
    stores = obj.stores(store_label)
    authority = obj.config.fencing.url
    if len(stores) == 1 and stores[0].label is None and authority is None:
        _one(stores[0], check_only, as_json)
        return
    results: dict[str, dict[str, Any]] = {}
    codes = []
    for store in stores:
        try:
            data = _migrate(store, check_only)
        except Refusal as exc:
            data = {**(exc.data or {}), "error": exc.message}
            codes.append(exc.code)
        results[str(store.label or "database")] = {"ok": "error" not in data, **data}
    failed = [label for label, data in results.items() if not data["ok"]]
    report: dict[str, Any] = {"stores": results}
    if authority is not None:
        migrated = [s for s in stores if results[str(s.label or "database")]["ok"]]
        try:
            report["authority"] = {"ok": True, **_authority(authority, migrated, check_only)}
        except Refusal as exc:
            report["authority"] = {"ok": False, **(exc.data or {}), "error": exc.message}
            codes.append(exc.code)
    authority_failed = not report.get("authority", {"ok": True})["ok"]
    emit({"ok": not failed and not authority_failed, **report}, as_json, _report_text)
    if codes:
        if not as_json:
            where = [f"store(s) {', '.join(failed)}"] if failed else []
            where += ["the fencing authority"] if authority_failed else []
            click.echo(
                f"error: {'checking' if check_only else 'migrating'} failed in "
                f"{' and '.join(where)}",
                err=True,
            )
        sys.exit(codes[0])


def _authority(url: str, stores: list[StoreContext], check_only: bool) -> dict[str, Any]:
    """Migrate (or check) the fencing authority, then carry each migrated store's counters
    into it (so it grants above every token they issued): what it applied, and from which
    stores; Refusal otherwise, naming the authority, never its URL."""
    backend = authority_backend(url)
    try:
        with backend.runner.connect(create=not check_only) as conn:
            if check_only:
                current = backend.migrator.status(conn)
            else:
                applied = [f"{m.version}_{m.name}" for m in backend.migrator.migrate(conn)]
                for store in stores:
                    with store.open() as store_conn:
                        counters = store.backend.runner.run(store_conn, select_counters())
                    backend.runner.run(conn, carry(counters, store.label))
                return {"applied": applied, "counters_from": [s.name for s in stores]}
    except MigrationError as exc:
        raise Refusal(EXIT_CONFLICT, f"fencing authority: {exc}") from None
    except UNAVAILABLE as exc:
        raise Refusal(
            EXIT_FAILURE, f"cannot connect to the fencing authority: {unavailable_text(exc)}"
        ) from None
    return _checked(current)


def _report_text(report: dict[str, Any]) -> str:
    text = _stores_text(report["stores"])
    authority = report.get("authority")
    if authority is None:
        return text
    if "applied" not in authority:  # as a store's: what it says when it could be read
        body = [f"error: {authority['error']}"]
    else:
        body = _text(authority).splitlines()
        if "counters_from" in authority:
            carried = ", ".join(authority["counters_from"]) or "none"
            body.append(f"counters carried from: {carried}")
    return "\n".join([text, "authority:", *(f"  {line}" for line in body)])


def _one(store: StoreContext, check_only: bool, as_json: bool) -> None:
    """The single [database] url: the output and exit codes of a store of its own."""
    try:
        data = _migrate(store, check_only)
    except Refusal as exc:
        if exc.data is None:
            fail(exc.message, exc.code)
        emit(exc.data, as_json, _text)
        sys.exit(exc.code)
    emit(data, as_json, _text)


def _migrate(store: StoreContext, check_only: bool) -> dict[str, Any]:
    """Migrate (or check) one store: what it applied (or its status); Refusal otherwise."""
    backend = store.backend
    try:
        with store.open(create=not check_only, write=not check_only) as conn:
            if not check_only:
                return {
                    "applied": [f"{m.version}_{m.name}" for m in backend.migrator.migrate(conn)]
                }
            current = backend.migrator.status(conn)
    except MigrationError as exc:
        raise Refusal(EXIT_CONFLICT, str(exc)) from None
    except ReadOnlyServer as exc:  # as the daemon refuses to start on it
        raise Refusal(EXIT_INVALID, str(exc)) from None
    except UNAVAILABLE as exc:  # its class and SQLSTATE: the driver's text may quote the URL
        raise Refusal(
            EXIT_FAILURE, f"cannot connect to the database: {unavailable_text(exc)}"
        ) from None
    return _checked(current)


def _text(data: dict[str, Any]) -> str:
    if "pending" not in data:
        return "\n".join(f"applied {n}" for n in data["applied"]) or "schema is up to date"
    return "\n".join(
        [
            f"applied: {', '.join(map(str, data['applied'])) or 'none'}",
            f"pending: {', '.join(data['pending']) or 'none'}",
        ]
        + [f"problem: {p}" for p in data["problems"]]
    )


def _stores_text(stores: dict[str, dict[str, Any]]) -> str:
    lines = []
    for label, data in stores.items():
        lines.append(f"store {label}:" if label != "database" else "database:")
        body = _text(data).splitlines() if "applied" in data else [f"error: {data['error']}"]
        lines += [f"  {line}" for line in body]
    return "\n".join(lines)


def _checked(current: MigrationStatus) -> dict[str, Any]:
    """A store's or the authority's migration status as `migrate --check` reports it: what is
    applied; Refusal when a migration is pending or the schema is newer or changed."""
    data: dict[str, Any] = {
        "applied": current.applied,
        "pending": [f"{m.version}_{m.name}" for m in current.pending],
        "problems": current.problems,
    }
    if current.problems:
        raise Refusal(EXIT_CONFLICT, "; ".join(current.problems), data)
    if current.pending:
        raise Refusal(EXIT_PENDING, f"pending: {', '.join(data['pending'])}", data)
    return data

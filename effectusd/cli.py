"""The effectusd command line (DESIGN.md section 11).

Exit codes scripts can rely on: 0 success; 1 operational failure (database unreachable, …);
2 usage error; 3 invalid input (plan, facts or config); 4 conflict (the state or an existing
saga does not allow it); 5 not found; 6 `migrate --check` found pending migrations.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

import click
import psycopg

from effectusd import render
from effectusd.client import Client
from effectusd.config import Config, ConfigError, load_config
from effectusd.core.canonical import parse_json
from effectusd.core.checker import PlanCheckError, check
from effectusd.core.durations import parse_duration
from effectusd.core.states import SagaState
from effectusd.core.submission import SubmitConflict, SubmitError
from effectusd.store.postgres import migrations

EXIT_FAILURE = 1
EXIT_INVALID = 3
EXIT_CONFLICT = 4
EXIT_NOT_FOUND = 5
EXIT_PENDING = 6


class Context:
    def __init__(self, config_path: str | None, database_url: str | None) -> None:
        self.config_path = config_path
        self._database_url = database_url
        self._config: Config | None = None

    @property
    def config(self) -> Config:
        if self._config is None:
            path = self.config_path
            if path is None and Path("effectusd.toml").exists():
                path = "effectusd.toml"
            try:
                self._config = load_config(path)
            except ConfigError as exc:
                fail(str(exc), EXIT_INVALID)
        return self._config

    @property
    def database_url(self) -> str:
        return self._database_url or self.config.database.url

    def client(self) -> Client:
        return Client(self.config, database_url=self.database_url)

    def connect(self) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(self.database_url, autocommit=True)
        except psycopg.OperationalError as exc:
            fail(f"cannot connect to the database: {str(exc).strip()}", EXIT_FAILURE)


def fail(message: str, code: int) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def emit(data: Any, as_json: bool, human: Callable[[Any], str]) -> None:
    if as_json:
        click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))
    else:
        click.echo(human(data))


def read_json_file(path: str, what: str) -> Any:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        fail(f"{path}: cannot read {what}: {exc.strerror}", EXIT_INVALID)
    try:
        return parse_json(text)
    except ValueError as exc:
        fail(f"{path}: {exc}", EXIT_INVALID)


def report_check_error(source: str, error: PlanCheckError) -> NoReturn:
    click.echo(f"{source}: {len(error.issues)} problem(s):", err=True)
    for issue in error.issues:
        click.echo(f"  {issue}", err=True)
    sys.exit(EXIT_INVALID)


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    "config_path",
    envvar="EFFECTUSD_CONFIG",
    type=click.Path(dir_okay=False),
    help="TOML config file (env EFFECTUSD_CONFIG; default ./effectusd.toml if present).",
)
@click.option(
    "--database-url",
    envvar="EFFECTUSD_DATABASE_URL",
    help="PostgreSQL URL (env EFFECTUSD_DATABASE_URL; overrides the config).",
)
@click.version_option(package_name="effectusd")
@click.pass_context
def main(ctx: click.Context, config_path: str | None, database_url: str | None) -> None:
    """effectusd: a transactional-outbox saga dispatcher.

    Exit codes: 0 ok, 1 operational failure, 2 usage, 3 invalid input, 4 conflict,
    5 not found, 6 pending migrations (migrate --check).
    """
    ctx.obj = Context(config_path, database_url)


@main.command()
@click.option(
    "--check", "check_only", is_flag=True, help="Only report; exit 6 if anything is pending."
)
@json_option
@click.pass_obj
def migrate(obj: Context, check_only: bool, as_json: bool) -> None:
    """Apply pending schema migrations (under an advisory lock)."""
    with obj.connect() as conn:
        try:
            if check_only:
                current = migrations.status(conn)
                data = {
                    "applied": current.applied,
                    "pending": [f"{m.version}_{m.name}" for m in current.pending],
                    "problems": current.problems,
                }
                emit(
                    data,
                    as_json,
                    lambda d: "\n".join(
                        [
                            f"applied: {', '.join(map(str, d['applied'])) or 'none'}",
                            f"pending: {', '.join(d['pending']) or 'none'}",
                        ]
                        + [f"problem: {p}" for p in d["problems"]]
                    ),
                )
                if current.problems:
                    sys.exit(EXIT_CONFLICT)
                if current.pending:
                    sys.exit(EXIT_PENDING)
                return
            applied = migrations.migrate(conn)
        except migrations.MigrationError as exc:
            fail(str(exc), EXIT_CONFLICT)
    names = [f"{m.version}_{m.name}" for m in applied]
    emit(
        {"applied": names},
        as_json,
        lambda d: "\n".join(f"applied {n}" for n in d["applied"]) or "schema is up to date",
    )


@main.command("check")
@click.argument("plan_file", type=click.Path(dir_okay=False))
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False),
    help="Write the checked plan (with contract hashes and digest) to this file.",
)
@json_option
@click.pass_obj
def check_command(obj: Context, plan_file: str, output: str | None, as_json: bool) -> None:
    """Check a plan against the configured verbs; report every problem at once."""
    plan = read_json_file(plan_file, "plan")
    try:
        checked = check(plan, obj.config.verbs)
    except PlanCheckError as exc:
        if as_json:
            emit({"ok": False, "problems": [str(i) for i in exc.issues]}, True, str)
            sys.exit(EXIT_INVALID)
        report_check_error(plan_file, exc)
    if output:
        Path(output).write_text(json.dumps(checked.document(), indent=2) + "\n", encoding="utf-8")
    emit(
        {
            "ok": True,
            "plan_id": checked.plan_id,
            "plan_digest": checked.plan_digest,
            "steps": [s.id for s in checked.steps],
        },
        as_json,
        lambda d: (
            f"{plan_file}: ok — plan {d['plan_id']}, {len(d['steps'])} step(s) "
            f"({', '.join(d['steps'])}), digest {d['plan_digest']}"
        ),
    )


@main.command()
@click.argument("plan_file", type=click.Path(dir_okay=False))
@click.option("--execution-id", required=True, help="Your business id for this run (e.g. order-7).")
@click.option("--facts", "facts_json", default="{}", help="Facts as a JSON object.")
@click.option(
    "--not-before",
    type=click.DateTime(formats=["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%S"]),
    help="Do not dispatch the first step before this time (ISO 8601; UTC if no offset).",
)
@json_option
@click.pass_obj
def submit(
    obj: Context,
    plan_file: str,
    execution_id: str,
    facts_json: str,
    not_before: datetime | None,
    as_json: bool,
) -> None:
    """Submit a plan (raw or checked) as a new saga. Re-submitting the same is a no-op."""
    plan = read_json_file(plan_file, "plan")
    try:
        facts = parse_json(facts_json)
    except ValueError as exc:
        fail(f"--facts: {exc}", EXIT_INVALID)
    if not isinstance(facts, dict):
        fail("--facts must be a JSON object", EXIT_INVALID)
    if not_before is not None and not_before.tzinfo is None:
        from datetime import UTC

        not_before = not_before.replace(tzinfo=UTC)
    try:
        result = obj.client().submit(
            plan, execution_id=execution_id, facts=facts, not_before=not_before, actor="cli"
        )
    except PlanCheckError as exc:
        report_check_error(plan_file, exc)
    except SubmitConflict as exc:
        fail(str(exc), EXIT_CONFLICT)
    except SubmitError as exc:
        fail(str(exc), EXIT_INVALID)
    except psycopg.OperationalError as exc:
        fail(f"database: {str(exc).strip()}", EXIT_FAILURE)
    emit(
        {"saga_id": result.saga_id, "created": result.created},
        as_json,
        lambda d: f"{'submitted' if d['created'] else 'already submitted'} saga {d['saga_id']}",
    )


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
    except psycopg.OperationalError as exc:
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
    except psycopg.OperationalError as exc:
        fail(f"database: {str(exc).strip()}", EXIT_FAILURE)
    if view is None:
        fail(f"saga {saga_id} not found", EXIT_NOT_FOUND)
    emit(view, as_json, render.saga_detail)


@main.command()
@click.option(
    "--until-idle",
    is_flag=True,
    help="Exit 0 once nothing is queued, in flight or due within a short wait.",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 10_000),
    help="Concurrent calls overall (overrides dispatcher.concurrency).",
)
@click.option("--log-format", type=click.Choice(["text", "json"]), help="Log line format.")
@click.option(
    "--http-port",
    type=click.IntRange(0, 65535),
    help="Serve /metrics, /healthz and /readyz on this loopback port (0: any free port).",
)
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]),
)
@click.pass_obj
def run(
    obj: Context,
    until_idle: bool,
    workers: int | None,
    log_format: str | None,
    http_port: int | None,
    log_level: str,
) -> None:
    """Run the dispatcher daemon (SIGTERM drains in-flight calls and exits 0)."""
    import asyncio

    from effectusd.dispatcher.daemon import Daemon
    from effectusd.logs import configure_logging

    config = obj.config
    if workers is not None:
        config.dispatcher.concurrency = workers
    if http_port is not None:
        config.observability.http_port = http_port
    configure_logging(log_format or config.observability.log_format, log_level)
    daemon = Daemon(config, obj.database_url)
    try:
        code = asyncio.run(daemon.run(until_idle=until_idle))
    except ConfigError as exc:
        fail(str(exc), EXIT_INVALID)
    except migrations.MigrationError as exc:
        fail(str(exc), EXIT_CONFLICT)
    except psycopg.OperationalError as exc:
        fail(f"database: {str(exc).strip()}", EXIT_FAILURE)
    sys.exit(code)


@main.command()
@click.option("--sagas", default=1000, show_default=True, type=click.IntRange(1, 1_000_000))
@click.option("--steps", default=5, show_default=True, type=click.IntRange(1, 100))
@click.option("--concurrency", default=32, show_default=True, type=click.IntRange(1, 10_000))
@click.option("--destination", help="Drive this HTTP endpoint instead of the built-in no-op one.")
@json_option
@click.pass_obj
def bench(
    obj: Context, sagas: int, steps: int, concurrency: int, destination: str | None, as_json: bool
) -> None:
    """Measure steps/s, enqueue→dispatch latency and commits per step (uses a scratch DB on
    the configured server, dropped afterwards)."""
    from dataclasses import asdict

    from effectusd.bench import format_result, run_bench

    def progress(message: str) -> None:
        click.echo(message, err=True)

    try:
        result = run_bench(obj.database_url, sagas, steps, concurrency, destination, progress)
    except psycopg.OperationalError as exc:
        fail(f"database: {str(exc).strip()}", EXIT_FAILURE)
    emit(asdict(result), as_json, lambda _: format_result(result))


# -- operator actions: resolve, retry, cancel, prune --------------------------------------
# Each of resolve/retry/cancel is one transaction that locks the saga row, then its dispatch
# rows; a refusal (the state does not allow it) exits 4 and names the state, writes nothing.

actor_option = click.option(
    "--actor", help="Who is acting, for the timeline (default: user:<your OS user>)."
)


def _operator_action(obj: Context, build: Callable[..., Any], as_json: bool) -> None:
    """Run one operator operation (built by ``build(registry)``) and report it."""
    from effectusd.client import registry_from_config
    from effectusd.core.operator_decisions import RefusalKind, Refused
    from effectusd.store.postgres.runner import run as run_operation

    codes = {
        RefusalKind.CONFLICT: EXIT_CONFLICT,
        RefusalKind.NOT_FOUND: EXIT_NOT_FOUND,
        RefusalKind.INVALID: EXIT_INVALID,
    }
    try:
        operation = build(registry_from_config(obj.config))
        with obj.connect() as conn:
            report = run_operation(conn, operation)
    except Refused as exc:
        if as_json:
            emit({"ok": False, "refused": exc.kind.value, "error": exc.message}, True, str)
        fail(exc.message, codes[exc.kind])
    except psycopg.OperationalError as exc:
        fail(f"database: {str(exc).strip()}", EXIT_FAILURE)
    emit(report.as_dict(), as_json, lambda _: report.summary())


@main.command()
@click.argument("saga_id")
@click.argument("effect_id")
@click.option(
    "--committed", is_flag=True, help="The destination has the effect: settle as success."
)
@click.option("--not-committed", is_flag=True, help="It does not: then --retry or --fail.")
@click.option("--retry", "send_again", is_flag=True, help="Send again: same key, new attempt.")
@click.option("--fail", "give_up", is_flag=True, help="Treat as a permanent failure.")
@click.option("--result", "result_json", help="With --committed: the step's result (JSON).")
@click.option("--evidence", help="What you checked (required; goes on the timeline).")
@click.option(
    "--direction",
    type=click.Choice(["forward", "compensation"]),
    help="Which dispatch of the effect (default: the one in blocked_unknown).",
)
@actor_option
@json_option
@click.pass_obj
def resolve(
    obj: Context,
    saga_id: str,
    effect_id: str,
    committed: bool,
    not_committed: bool,
    send_again: bool,
    give_up: bool,
    result_json: str | None,
    evidence: str | None,
    direction: str | None,
    actor: str | None,
    as_json: bool,
) -> None:
    """Settle a dispatch in blocked_unknown from what you found out at the destination.

    \b
    --committed [--result JSON]   it took effect: the saga moves on
    --not-committed --retry       it did not: send again with the same key
    --not-committed --fail        it did not: fail the step (compensation starts)
    """
    from effectusd import operator
    from effectusd.client import default_actor
    from effectusd.core import operator_decisions as decide
    from effectusd.core.states import Direction

    def build(registry: Any) -> Any:
        where = Direction(direction) if direction else None
        return operator.resolve(
            saga_id,
            effect_id,
            decide.resolution(
                committed, not_committed, send_again, give_up, result_json is not None
            ),
            registry=registry,
            actor=actor or default_actor(),
            evidence=decide.required_evidence(evidence),
            result=decide.committed_result(result_json, where),
            direction=where,
        )

    _operator_action(obj, build, as_json)


@main.command("retry")
@click.argument("saga_id")
@click.option("--evidence", help="Why it is safe to send again now (goes on the timeline).")
@actor_option
@json_option
@click.pass_obj
def retry_command(
    obj: Context, saga_id: str, evidence: str | None, actor: str | None, as_json: bool
) -> None:
    """Send the dispatch that blocked the saga again, with a fresh retry budget.

    For blocked_fence, blocked_contract (only once the loaded config has the pinned contract
    again) and blocked_compensation.
    """
    from effectusd import operator
    from effectusd.client import default_actor
    from effectusd.core.operator_decisions import optional_evidence

    _operator_action(
        obj,
        lambda registry: operator.retry(
            saga_id,
            registry=registry,
            actor=actor or default_actor(),
            evidence=optional_evidence(evidence),
        ),
        as_json,
    )


@main.command()
@click.argument("saga_id")
@click.option("--evidence", help="Why it is canceled (goes on the timeline).")
@actor_option
@json_option
@click.pass_obj
def cancel(
    obj: Context, saga_id: str, evidence: str | None, actor: str | None, as_json: bool
) -> None:
    """Cancel a running saga: undo its succeeded steps in reverse order.

    A dispatch not yet sent is canceled now; one in flight finishes first (the engine then
    compensates). Terminal and blocked sagas are refused.
    """
    from effectusd import operator
    from effectusd.client import default_actor
    from effectusd.core.operator_decisions import optional_evidence

    _operator_action(
        obj,
        lambda registry: operator.cancel(
            saga_id,
            registry=registry,
            actor=actor or default_actor(),
            evidence=optional_evidence(evidence),
        ),
        as_json,
    )


@main.command()
@click.option("--older-than", required=True, help="Finished longer ago than this (e.g. 30d).")
@click.option("--dry-run", is_flag=True, help="Only list what would be deleted.")
@click.option("--batch-size", default=500, show_default=True, type=click.IntRange(1, 100_000))
@json_option
@click.pass_obj
def prune(obj: Context, older_than: str, dry_run: bool, batch_size: int, as_json: bool) -> None:
    """Delete finished sagas (completed, compensated, failed) with their steps, outbox rows,
    attempts and timeline; each batch is its own transaction. Blocked and live sagas stay."""
    from effectusd import operator
    from effectusd.core.durations import parse_duration

    try:
        age = parse_duration(older_than)
    except ValueError as exc:
        fail(f"--older-than: {exc}", EXIT_INVALID)
    try:
        with obj.connect() as conn:
            report = operator.prune(conn, age, batch_size, dry_run)
    except psycopg.OperationalError as exc:
        fail(f"database: {str(exc).strip()}", EXIT_FAILURE)
    emit(report.as_dict(), as_json, lambda _: report.summary())


if __name__ == "__main__":
    main()

"""Operator actions: resolve, retry, cancel, adopt-contract (prune: cli/prune.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

import click

from effectusd.cli.app import (
    EXIT_CONFLICT,
    EXIT_FAILURE,
    EXIT_INVALID,
    EXIT_NOT_FOUND,
    Context,
    StoreContext,
    emit,
    fail,
    json_option,
    main,
)
from effectusd.cli.naming import fail_ambiguous, saga_id_argument
from effectusd.cli.stores import emit_by_store, holder, store_option, warn
from effectusd.core.errors import AmbiguousSaga
from effectusd.store.across import each_store, nowhere_text, saga_name

# -- operator actions: resolve, retry, cancel (prune: cli/prune.py) -----------------------
# Each of resolve/retry/cancel is one transaction that locks the saga row, then its dispatch
# rows; a refusal (the state does not allow it) exits 4 and names the state, writes nothing.


def _one_line(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--actor and --evidence go on the timeline and into the log: a control character (a
    newline that would print as a line of its own), and in --actor a character that shows as
    nothing (a zero-width space), is a usage error naming the option."""
    from effectusd.core.canonical import unprintable_problem
    from effectusd.core.operator_decisions import name_problem

    check = name_problem if param.name == "actor" else unprintable_problem
    problem = None if value is None else check(value)
    if problem is not None:
        raise click.BadParameter(problem, ctx=ctx, param=param)
    return value


def evidence_option(help: str) -> Callable[[Any], Any]:
    return click.option("--evidence", help=help, callback=_one_line)


actor_option = click.option(
    "--actor",
    help="Who is acting, for the timeline (default: user:<your OS user>).",
    callback=_one_line,
)


def _operator_action(
    obj: Context, saga: str, build: Callable[[Any], Callable[[str], Any]], as_json: bool
) -> None:
    """Run one operator operation on the saga ``saga`` names (its id or the unique start of
    it, found in the same transaction, in whichever store holds it) and report it: the
    report, like the timeline, carries the full id. ``build(registry)`` checks the command's
    input before anything is read and gives the operation for a saga id."""
    from effectusd.core.operator_decisions import RefusalKind, Refused
    from effectusd.operator import on_saga
    from effectusd.store.operations import find_sagas

    codes = {
        RefusalKind.CONFLICT: EXIT_CONFLICT,
        RefusalKind.NOT_FOUND: EXIT_NOT_FOUND,
        RefusalKind.INVALID: EXIT_INVALID,
    }
    try:
        operation = on_saga(saga, build(obj.config.registry()))
        name = saga_name(saga)
        store = holder(obj, name, lambda _: find_sagas(prefix=saga), as_json)
        if store is None:
            raise Refused(RefusalKind.NOT_FOUND, nowhere_text(name, obj.stores()))
        with store.connect(write=True) as conn:
            report = store.backend.runner.run(conn, operation)
    except Refused as exc:
        if as_json:
            emit({"ok": False, "refused": exc.kind.value, "error": exc.message}, True, str)
        fail(exc.message, codes[exc.kind])
    except AmbiguousSaga as exc:
        if as_json:
            emit({"ok": False, "refused": "ambiguous", "error": str(exc)}, True, str)
        fail_ambiguous(exc)
    _release_fences(obj, store, report.saga_id)
    if store.label is None:
        emit(report.as_dict(), as_json, lambda _: report.summary())
        return
    # several stores: which one held the saga
    data = {**report.as_dict(), "store": store.label}
    emit(data, as_json, lambda _: f"{report.summary()}\n  store     {store.label}")


def _release_fences(obj: Context, store: StoreContext, saga_id: str) -> None:
    """With a fencing authority: give back there the leases of the saga's ended claims, now
    that the action committed; a failure is said on stderr, and the action stands."""
    url = obj.config.fencing.url
    if url is None:
        return
    from effectusd.operator.fences import release_ended_leases

    why = release_ended_leases(url, store.backend, store.label, saga_id)
    if why is not None:
        click.echo(
            f"warning: the fencing authority could not be asked ({why}): the leases of the "
            "saga's ended claims run out there by themselves (the dispatch lease plus 10 s)",
            err=True,
        )


def _saga_action(
    obj: Context,
    name: str,
    saga_id: str,
    evidence: str | None,
    actor: str | None,
    as_json: bool,
) -> None:
    """retry and cancel: the same arguments, one operator action each."""
    from effectusd import operator
    from effectusd.client import default_actor
    from effectusd.core.operator_decisions import optional_evidence

    action = getattr(operator, name)

    def build(registry: Any) -> Callable[[str], Any]:
        who, text = actor or default_actor(), optional_evidence(evidence)
        return lambda full_id: action(full_id, registry=registry, actor=who, evidence=text)

    _operator_action(obj, saga_id, build, as_json)


@main.command()
@saga_id_argument()
@click.argument("effect_id")
@click.option(
    "--committed", is_flag=True, help="The destination has the effect: settle as success."
)
@click.option("--not-committed", is_flag=True, help="It does not: then --retry or --fail.")
@click.option("--retry", "send_again", is_flag=True, help="Send again: same key, new attempt.")
@click.option("--fail", "give_up", is_flag=True, help="Treat as a permanent failure.")
@click.option("--result", "result_json", help="With --committed: the step's result (JSON).")
@evidence_option("What you checked (required; goes on the timeline).")
@click.option(
    "--direction",
    type=click.Choice(["forward", "compensation"]),
    help=(
        "Which dispatch of the effect (default: the one in blocked_unknown). compensation "
        "also settles the failed compensation of a blocked_compensation saga."
    ),
)
@actor_option
@store_option()
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
    store_label: str | None,
    as_json: bool,
) -> None:
    """Settle a dispatch in blocked_unknown from what you found out at the destination.

    \b
    --committed [--result JSON]   it took effect: the saga moves on
    --not-committed --retry       it did not: send again with the same key
    --not-committed --fail        it did not: fail the step (compensation starts)

    In a blocked_compensation saga, `--direction compensation` settles the compensation that
    failed permanently: --committed when you undid the effect by hand (compensation goes on
    with the earlier steps), --not-committed --retry to send it again (as `retry` does).
    """
    from effectusd import operator
    from effectusd.client import default_actor
    from effectusd.core import operator_decisions as decide
    from effectusd.core.states import Direction

    obj.selected = store_label

    def build(registry: Any) -> Callable[[str], Any]:
        where = Direction(direction) if direction else None
        how = decide.resolution(
            committed, not_committed, send_again, give_up, result_json is not None
        )
        text = decide.required_evidence(evidence)
        result = decide.committed_result(result_json, where)
        return lambda full_id: operator.resolve(
            full_id,
            effect_id,
            how,
            registry=registry,
            actor=actor or default_actor(),
            evidence=text,
            result=result,
            direction=where,
        )

    _operator_action(obj, saga_id, build, as_json)


@main.command("retry")
@saga_id_argument()
@evidence_option("Why it is safe to send again now (goes on the timeline).")
@actor_option
@store_option()
@json_option
@click.pass_obj
def retry_command(
    obj: Context,
    saga_id: str,
    evidence: str | None,
    actor: str | None,
    store_label: str | None,
    as_json: bool,
) -> None:
    """Send the dispatch that blocked the saga again, with a fresh retry budget.

    For blocked_fence, blocked_contract (only once the loaded config has the pinned contract
    again), blocked_destination (once its credential or route is fixed) and
    blocked_compensation.
    """
    obj.selected = store_label
    _saga_action(obj, "retry", saga_id, evidence, actor, as_json)


@main.command()
@saga_id_argument()
@evidence_option("Why it is canceled (goes on the timeline).")
@actor_option
@store_option()
@json_option
@click.pass_obj
def cancel(
    obj: Context,
    saga_id: str,
    evidence: str | None,
    actor: str | None,
    store_label: str | None,
    as_json: bool,
) -> None:
    """Cancel a running saga: undo its succeeded steps in reverse order.

    A dispatch not yet sent is canceled now; one in flight finishes first (the engine then
    compensates). Terminal and blocked sagas are refused.
    """
    obj.selected = store_label
    _saga_action(obj, "cancel", saga_id, evidence, actor, as_json)


@main.command("adopt-contract")
@saga_id_argument(required=False)
@click.option("--verb", help="Every saga blocked_contract on this verb (instead of SAGA_ID).")
@evidence_option("Why the changed contract is right for these sagas (required).")
@actor_option
@store_option()
@json_option
@click.pass_obj
def adopt_contract(
    obj: Context,
    saga_id: str | None,
    verb: str | None,
    evidence: str | None,
    actor: str | None,
    store_label: str | None,
    as_json: bool,
) -> None:
    """Move blocked_contract sagas to the verb contracts loaded now, and resume them.

    \b
    adopt-contract SAGA_ID --evidence TEXT       every drifted verb of that saga
    adopt-contract --verb VERB --evidence TEXT   every saga blocked on VERB

    Re-pins the saga's plan (new plan digest) and steps to the loaded contract hashes,
    rebuilds a dispatch the guard stopped (same arguments and idempotency key), records the
    adoption with your evidence and sends the saga on, as `retry` does.
    """
    from effectusd import operator
    from effectusd.client import default_actor
    from effectusd.core import operator_decisions as decide

    obj.selected = store_label
    if (saga_id is None) == (verb is None):
        if as_json:
            emit({"ok": False, "refused": "invalid", "error": "give SAGA_ID or --verb"}, True, str)
        fail("give SAGA_ID or --verb (one of them)", EXIT_INVALID)
    who = actor or default_actor()
    if saga_id is not None:

        def build(registry: Any) -> Callable[[str], Any]:
            text = decide.required_evidence(evidence)
            return lambda full_id: operator.adopt_contract(
                full_id, registry=registry, actor=who, evidence=text
            )

        _operator_action(obj, saga_id, build, as_json)
        return
    assert verb is not None
    registry = obj.config.registry()
    try:
        text = decide.required_evidence(evidence)
        if verb not in registry.verbs:
            raise decide.Refused(
                decide.RefusalKind.CONFLICT,
                f"verb {verb!r} is not in the loaded config: there is no contract to adopt",
            )
    except decide.Refused as exc:
        if as_json:
            emit({"ok": False, "refused": exc.kind.value, "error": exc.message}, True, str)
        fail(exc.message, EXIT_INVALID if exc.kind is decide.RefusalKind.INVALID else EXIT_CONFLICT)
    stores = obj.stores()
    if len(stores) > 1 or stores[0].label is not None:
        _adopt_verb_in_stores(stores, registry, verb, who, text, as_json)
    report = _adopt_verb(stores[0], registry, verb, who, text, alone=True)
    emit(report.as_dict(), as_json, lambda _: report.summary())
    if not report.ok:
        raise SystemExit(EXIT_CONFLICT)


def _adopt_verb_in_stores(
    stores: list[StoreContext], registry: Any, verb: str, actor: str, evidence: str, as_json: bool
) -> NoReturn:
    """adopt-contract --verb in each store, reported by label; a store that is down is named
    (exit 1) and the others adopted; a refused saga in any store exits 4."""
    done, unreached = each_store(
        stores,
        lambda store: _adopt_verb(store, registry, verb, actor, evidence, alone=False),
    )
    emit_by_store(done, unreached, as_json)
    warn(unreached, "searched")
    if unreached:
        raise SystemExit(EXIT_FAILURE)
    raise SystemExit(EXIT_CONFLICT if not all(report.ok for _, report in done) else 0)


def _adopt_verb(
    store: StoreContext, registry: Any, verb: str, actor: str, evidence: str, *, alone: bool
) -> Any:
    """One guarded transaction per saga: a saga that is refused leaves the others adopted."""
    from effectusd.core.operator_decisions import Refused
    from effectusd.operator.adopt import (
        NotBlockedOnVerb,
        VerbAdoptionReport,
        adopt_contract,
        candidates,
    )

    report = VerbAdoptionReport(verb, actor, evidence)
    runner = store.backend.runner
    # alone: the one store's connection error exits 1 at once; else it raises, for each_store
    with store.connect(write=True) if alone else store.open(write=True) as conn:
        for saga_id in runner.run(conn, candidates()):
            operation = adopt_contract(
                saga_id, registry=registry, actor=actor, evidence=evidence, verb=verb
            )
            try:
                report.adopted.append(runner.run(conn, operation))
            except NotBlockedOnVerb as exc:
                report.skipped.append({"saga_id": saga_id, "error": exc.message})
            except Refused as exc:
                report.refused.append({"saga_id": saga_id, "error": exc.message})
    return report

"""Turning one step (forward or compensation) into the outbox row that will dispatch it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from effectusd.core.canonical import (
    MAX_PATH_CHARS,
    CanonicalJSONError,
    JsonValue,
    canonical_bytes,
    json_problems,
)
from effectusd.core.contracts import pinned, render_fencing
from effectusd.core.document_checks import literal_schema_issues, schema_issues
from effectusd.core.durations import to_milliseconds
from effectusd.core.expressions import (
    ResolutionError,
    needs_result,
    resolve,
    substitute_facts,
)
from effectusd.core.frozen import frozen
from effectusd.core.identity import argument_hash, idempotency_key
from effectusd.core.plan import CheckedStep
from effectusd.core.registry import Registry
from effectusd.core.states import Direction
from effectusd.core.templates import Template, TemplateError, encode_path_segment


class ContractDrift(ResolutionError):
    """The verb a step calls cannot be sent as its plan pinned it: ``why`` says whether it is
    not configured or changed since the plan was checked (``contracts.pinned``)."""

    def __init__(self, where: str, verb: str, why: str) -> None:
        super().__init__(f"{where}: verb {verb!r} {why}")
        self.verb = verb
        self.why = why


@frozen
class SagaRef:
    saga_id: str
    namespace: str
    execution_id: str


class NamesASaga(Protocol):
    """The saga a dispatch is built for, by what its row and key name of it: a ``SagaRef``,
    or the engine's ``SagaFacts`` as they are."""

    @property
    def saga_id(self) -> str: ...

    @property
    def namespace(self) -> str: ...

    @property
    def execution_id(self) -> str: ...


@frozen
class DispatchSpec:
    """One outbox row to insert (state queued). Field names are the column names."""

    saga_id: str
    effect_id: str
    direction: str
    namespace: str
    execution_id: str
    destination: str
    verb: str
    contract_hash: str
    delivery: str
    method: str
    path: str
    args_canonical: str
    args_hash: str
    idempotency_key: str
    fencing_resources: list[str]
    timeout_ms: int
    max_attempts: int


def _call(step: CheckedStep, direction: Direction) -> tuple[str, str, dict[str, JsonValue]]:
    """The verb, pinned contract hash and argument expressions of one direction of a step."""
    if direction is Direction.FORWARD:
        return step.verb, step.contract_hash, step.args
    if step.compensate is None:
        raise ResolutionError(f"step {step.id!r} has no compensation")
    comp = step.compensate
    return comp.verb, comp.contract_hash, comp.args


def build_dispatch(
    saga: NamesASaga,
    step: CheckedStep,
    direction: Direction,
    registry: Registry,
    facts: Mapping[str, JsonValue],
    results: Mapping[str, JsonValue],
) -> DispatchSpec:
    """Resolve arguments now and freeze everything the call needs.

    Raises ResolutionError (naming the step) when arguments cannot be resolved, are not
    canonical JSON, violate the verb's schema, or leave a path/fencing template unfilled;
    ContractDrift, one of them, when the verb is not configured or changed since checking
    (checked first: nothing is resolved for a verb that may not be sent).
    """
    if type(direction) is not Direction:
        direction = Direction(direction)
    verb, pinned_hash, args_expr = _call(step, direction)
    where = f"step {step.id!r} ({direction.value})"
    contract = registry.verbs.get(verb)
    if not pinned(contract, pinned_hash):
        why = "is not configured" if contract is None else "changed since the plan was checked"
        raise ContractDrift(where, verb, why)
    assert contract is not None  # pinned to no contract is never pinned
    try:
        args = resolve(args_expr, facts, results)
        if not isinstance(args, dict):
            raise ResolutionError("arguments must resolve to an object")
        body = canonical_bytes(args, "args")
        if contract.args_schema is not None:
            problems = schema_issues(args, contract.args_schema, "args")
            if problems:
                raise ResolutionError("; ".join(str(problem) for problem in problems))
        path = contract.render_path(args)
        fencing = contract.resolve_fencing(args, dict(facts))
    except (ResolutionError, CanonicalJSONError, TemplateError) as exc:
        raise ResolutionError(f"{where}: {exc}") from None
    return DispatchSpec(
        saga_id=saga.saga_id,
        effect_id=step.id,
        direction=direction.value,
        namespace=saga.namespace,
        execution_id=saga.execution_id,
        destination=contract.destination,
        verb=verb,
        contract_hash=pinned_hash,
        delivery=contract.delivery.value,
        method=contract.method,
        path=path,
        args_canonical=body.decode("utf-8"),
        args_hash=argument_hash(body),
        idempotency_key=idempotency_key(saga.namespace, saga.saga_id, step.id, direction),
        fencing_resources=fencing,
        timeout_ms=to_milliseconds(registry.timeout_for(contract)),
        max_attempts=contract.retry.max_attempts,
    )


def submit_time_problems(
    step: CheckedStep,
    direction: Direction,
    registry: Registry,
    facts: Mapping[str, JsonValue],
    *,
    built: bool = False,
) -> list[str]:
    """What is already certain to fail when this step is enqueued, found at submit from the
    facts alone (no result exists yet): arguments nested too deeply once facts are in, and
    path, probe path or fencing templates whose values are all known rendering unusable or
    too long. ``built``: the call itself was built at submit (a first step), so only its
    probe's path is left to check (build_dispatch never renders it: the probe is live
    configuration, and a change that breaks it is a probe failure, not a refused step)."""
    verb, _, args_expr = _call(step, direction)
    contract = registry.verbs.get(verb)
    if contract is None:
        return []  # the submit refuses it on its own
    where = f"step {step.id!r} ({direction.value})"
    try:
        args = resolve(args_expr, facts, {}, results_pending=True)
    except ResolutionError as exc:
        return [] if built else [f"{where}: {exc}"]
    if not isinstance(args, dict):
        return []
    problems = [] if built else json_problems(args, "args")
    if problems:
        return [f"{where}: {problem}" for problem in problems]
    if contract.args_schema is not None and not built:
        known_args = substitute_facts(args_expr, facts)
        issues = literal_schema_issues(known_args, contract.args_schema, "args")
        problems += [f"{where}: {issue}" for issue in issues]
    pending = {name for name, expr in args_expr.items() if needs_result(expr)}

    def known(template: Template) -> bool:
        return not any(p.scope == "args" and p.name in pending for p in template.placeholders)

    paths = contract.path_templates[1:] if built else contract.path_templates
    fencing = () if built else contract.fencing_templates
    try:
        for template in paths:  # the call's and its probe's
            if known(template):
                template.render_within(MAX_PATH_CHARS, "path", args, facts, encode_path_segment)
        for template in fencing:
            if known(template):
                render_fencing(template, args, facts)
    except TemplateError as exc:
        problems.append(f"{where}: {exc}")
    return problems

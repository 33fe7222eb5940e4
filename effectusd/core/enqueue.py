"""Turning one step (forward or compensation) into the outbox row that will dispatch it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from effectusd.core.canonical import CanonicalJSONError, JsonValue, canonical_bytes
from effectusd.core.checker import schema_issues
from effectusd.core.durations import to_milliseconds
from effectusd.core.expressions import ResolutionError, resolve
from effectusd.core.identity import argument_hash, idempotency_key
from effectusd.core.plan import CheckedStep
from effectusd.core.registry import Registry
from effectusd.core.states import Direction
from effectusd.core.templates import TemplateError


@dataclass(frozen=True)
class SagaRef:
    saga_id: str
    namespace: str
    execution_id: str


@dataclass(frozen=True)
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


def build_dispatch(
    saga: SagaRef,
    step: CheckedStep,
    direction: Direction,
    registry: Registry,
    facts: Mapping[str, JsonValue],
    results: Mapping[str, JsonValue],
) -> DispatchSpec:
    """Resolve arguments now and freeze everything the call needs.

    Raises ResolutionError (naming the step) when arguments cannot be resolved, are not
    canonical JSON, violate the verb's schema, or leave a path/fencing template unfilled;
    A verb missing from the live registry, or changed since checking, is reported the same way.
    """
    direction = Direction(direction)
    if direction is Direction.FORWARD:
        verb, pinned_hash, args_expr = step.verb, step.contract_hash, step.args
    else:
        if step.compensate is None:
            raise ResolutionError(f"step {step.id!r} has no compensation")
        comp = step.compensate
        verb, pinned_hash, args_expr = comp.verb, comp.contract_hash, comp.args
    where = f"step {step.id!r} ({direction.value})"
    contract = registry.verbs.get(verb)
    if contract is None:
        raise ResolutionError(f"{where}: verb {verb!r} is not in the live registry")
    if not contract.pins(pinned_hash):
        raise ResolutionError(f"{where}: verb {verb!r} changed since the plan was checked")
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

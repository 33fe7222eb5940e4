"""What a submit writes: the saga row, its step rows, the first dispatches and the first events.

Pure: the store executes these rows in one transaction (the caller's, for the outbox).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from effectusd.core.canonical import JsonValue, canonical_hash, canonical_text
from effectusd.core.check_issues import CheckIssue, PlanCheckError
from effectusd.core.checker import check, structure_issues, verify_checked
from effectusd.core.document_checks import document_issues, fact_issues
from effectusd.core.enqueue import DispatchSpec, SagaRef, build_dispatch, submit_time_problems
from effectusd.core.errors import EffectusError
from effectusd.core.expressions import ResolutionError
from effectusd.core.graph import PlanGraph
from effectusd.core.identity import saga_id as derive_saga_id
from effectusd.core.plan import CheckedPlan, PlanSpec
from effectusd.core.registry import Registry
from effectusd.core.states import Direction

EXECUTION_ID_MAX = 200
NAMESPACE = re.compile(r"[A-Za-z0-9_.-]{1,64}")


class SubmitError(EffectusError, ValueError):
    """A submit that was refused; nothing was written."""


class SubmitConflict(SubmitError):
    """The saga exists already with a different plan digest or different facts."""


class SagaPruned(SubmitConflict):
    """A saga with this identity finished and was pruned; its tombstone keeps the identity
    from being used again, because the new saga would send the old one's idempotency keys."""


@dataclass(frozen=True)
class SubmitRows:
    saga_id: str
    namespace: str
    execution_id: str
    plan_id: str
    plan_digest: str
    plan: str  # canonical JSON of the checked plan document
    facts: str  # canonical JSON
    facts_hash: str
    # The dispatch of every step that depends on none (PlanGraph.roots), in plan order: the
    # first step of a sequential plan, every root of a plan with `after`.
    first_dispatches: list[DispatchSpec]


def validate_namespace(namespace: str) -> None:
    if not NAMESPACE.fullmatch(namespace):
        raise SubmitError("namespace must be 1..64 of letters, digits, '_', '.', '-'")


def validate_execution_id(execution_id: str) -> None:
    if not execution_id or len(execution_id) > EXECUTION_ID_MAX:
        raise SubmitError(f"execution_id must be 1..{EXECUTION_ID_MAX} characters")
    if not all(0x21 <= ord(ch) <= 0x7E for ch in execution_id):
        raise SubmitError(
            "execution_id must be printable ASCII without spaces (it travels in a header)"
        )


def ensure_checked(
    plan: CheckedPlan | PlanSpec | Mapping[str, Any], registry: Registry
) -> CheckedPlan:
    """Check a raw plan; for an already checked plan, re-derive its digest and contract hashes."""
    if isinstance(plan, CheckedPlan):
        checked = plan
    elif isinstance(plan, Mapping) and "plan_digest" in plan:
        try:
            checked = CheckedPlan.model_validate(plan)
        except ValidationError as exc:
            # Only paths and reasons: pydantic's own text quotes the input, arguments included.
            issues = [
                CheckIssue(issue.path, f"not a checked plan: {issue.message}")
                for issue in structure_issues(exc)
            ]
            raise PlanCheckError(issues) from None
    else:
        return check(plan, registry.verbs)
    # Digests are computed over the document, so its nesting is bounded first (its size is
    # checked in the plan's written form by check() below, as for a raw plan).
    issues = document_issues(plan if isinstance(plan, Mapping) else checked.model_dump(), "")
    if issues:
        raise PlanCheckError(issues)
    issues = verify_checked(checked, registry.verbs)
    if issues:
        raise PlanCheckError(issues)
    # Anyone can recompute a digest: the content itself must pass check() and give the same.
    rechecked = check(as_spec(checked), registry.verbs)
    if rechecked.plan_digest != checked.plan_digest:
        raise PlanCheckError(
            [CheckIssue("plan_digest", "the checked plan does not re-check to the same digest")]
        )
    return checked


def as_spec(plan: CheckedPlan) -> PlanSpec:
    """The plan as written, recovered from its checked form."""
    return PlanSpec.model_validate(
        {
            "plan_id": plan.plan_id,
            "facts": {name: kind.value for name, kind in plan.facts.items()},
            "steps": [
                {
                    "id": step.id,
                    "verb": step.verb,
                    "args": step.args,
                    "compensate": (
                        "none"
                        if step.compensate is None
                        else {"verb": step.compensate.verb, "args": step.compensate.args}
                    ),
                    **({} if step.after is None else {"after": list(step.after)}),
                }
                for step in plan.steps
            ],
        }
    )


def prepare_submission(
    plan: CheckedPlan,
    registry: Registry,
    namespace: str,
    execution_id: str,
    facts: Mapping[str, JsonValue],
) -> SubmitRows:
    validate_namespace(namespace)
    validate_execution_id(execution_id)
    issues = fact_issues(plan.facts, facts)
    if issues:
        raise PlanCheckError(issues)
    saga_id = derive_saga_id(namespace, execution_id, plan.plan_id)
    saga = SagaRef(saga_id, namespace, execution_id)
    roots = PlanGraph.of(plan.steps).roots
    problems = later_problems(plan, registry, facts, roots)
    dispatches, root_problems = [], []
    for root in roots:
        try:
            dispatches.append(
                build_dispatch(saga, plan.step(root), Direction.FORWARD, registry, facts, {})
            )
        except ResolutionError as exc:
            root_problems.append(str(exc))
    problems = root_problems + problems
    if problems:
        raise SubmitError("; ".join(problems))
    for step in plan.steps:
        if step.verb not in registry.verbs:
            raise SubmitError(f"step {step.id!r}: verb {step.verb!r} is not in the live registry")
    facts_text = canonical_text(dict(facts), "facts")
    return SubmitRows(
        saga_id=saga_id,
        namespace=namespace,
        execution_id=execution_id,
        plan_id=plan.plan_id,
        plan_digest=plan.plan_digest,
        plan=canonical_text(plan.document()),
        facts=facts_text,
        facts_hash=canonical_hash(dict(facts), "facts"),
        first_dispatches=dispatches,
    )


def later_problems(
    plan: CheckedPlan,
    registry: Registry,
    facts: Mapping[str, JsonValue],
    roots: Sequence[str],
) -> list[str]:
    """Every step (of the ``roots``, built for real at submit, only the probe's path) and every
    compensation, as far as the facts decide them: what must fail later is refused now, while
    nothing is written."""
    built = set(roots)
    problems = []
    for step in plan.steps:
        problems += submit_time_problems(
            step, Direction.FORWARD, registry, facts, built=step.id in built
        )
        if step.compensate is not None:
            problems += submit_time_problems(step, Direction.COMPENSATION, registry, facts)
    return problems


def conflict_with_existing(rows: SubmitRows, plan_digest: str, facts_hash: str) -> str | None:
    """Why an existing saga with the same identity differs from this submit (None: same)."""
    differences = []
    if plan_digest != rows.plan_digest:
        differences.append(f"plan digest {plan_digest[:12]}… ≠ {rows.plan_digest[:12]}…")
    if facts_hash != rows.facts_hash:
        differences.append("facts differ")
    if not differences:
        return None
    return (
        f"saga {rows.saga_id} (execution {rows.execution_id!r}, plan {rows.plan_id!r}) "
        f"already exists with different content: {', '.join(differences)}"
    )


def pruned_identity(
    rows: SubmitRows, state: str, finished_at: datetime | None, pruned_at: datetime
) -> SagaPruned:
    """The refusal of a submit whose identity belongs to a pruned saga (its tombstone)."""
    finished = (
        f"finished {state} at {finished_at.isoformat()}"
        if finished_at is not None
        else f"was deleted while {state}"
    )
    return SagaPruned(
        f"saga {rows.saga_id} (execution {rows.execution_id!r}, plan {rows.plan_id!r}) "
        f"{finished} and was pruned at {pruned_at.isoformat()}; a new saga with this identity "
        "would send the same idempotency keys, which destinations may still answer from the "
        "old saga: use a new execution id"
    )

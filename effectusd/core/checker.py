"""check(plan, verbs): a CheckedPlan, or every problem at once (docs/design.md section 4).

The issue types live in effectusd.core.check_issues and the JSON document, fact and schema
checks in effectusd.core.document_checks; the issue types are importable from here too."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from effectusd.core.canonical import (
    MAX_FENCING_RESOURCE_CHARS,
    MAX_PATH_CHARS,
    MAX_PLAN_BYTES,
    JsonValue,
    canonical_hash,
    join_path,
    nesting_exceeded,
)
from effectusd.core.check_issues import CheckIssue, PlanCheckError, issues_from
from effectusd.core.contracts import VerbContract
from effectusd.core.dependency_checks import after_issues, runs_before
from effectusd.core.document_checks import document_issues, literal_schema_issues
from effectusd.core.expressions import FactRef, Reference, ResultRef, resolve, scan
from effectusd.core.plan import (
    CHECKED_PLAN_FORMAT,
    CheckedCompensation,
    CheckedPlan,
    CheckedStep,
    PlanSpec,
    StepSpec,
)
from effectusd.core.templates import Template, TemplateError, encode_path_segment

__all__ = [
    "CheckIssue",
    "PlanCheckError",
    "check",
    "structure_issues",
    "verify_checked",
]

# Ids travel in HTTP headers, so they are restricted to a safe ASCII alphabet.
IDENTIFIER = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,127}$")
_IDENTIFIER_RULE = "must start with a letter and use only letters, digits, '_', '.', '-' (≤128)"


def check(plan: PlanSpec | Mapping[str, Any], verbs: Mapping[str, VerbContract]) -> CheckedPlan:
    """Check a plan against the live verbs; raise PlanCheckError listing every problem."""
    issues: list[CheckIssue] = []
    if isinstance(plan, Mapping) and not isinstance(plan, dict):
        plan = dict(plan)  # a read-only Mapping (plan_builder.Plan) is checked as its dict
    # Python mode: a NaN or a set put into a PlanSpec must be refused, not coerced.
    raw = plan.model_dump() if isinstance(plan, PlanSpec) else plan
    issues.extend(document_issues(raw, "", MAX_PLAN_BYTES, "the plan"))
    if nesting_exceeded([str(issue) for issue in issues]):
        raise PlanCheckError(issues)  # the checks below walk the plan recursively
    if isinstance(plan, PlanSpec):
        spec: PlanSpec | None = plan
        original: list[int] | None = None
    else:
        spec, original = _parse_structure(plan, issues)
    if spec is None:
        raise PlanCheckError(issues)
    checked = _check_semantics(spec, verbs, issues, original, _step_ids(plan, spec, original))
    if issues or checked is None:
        raise PlanCheckError(issues)
    return checked


def _parse_structure(
    plan: Mapping[str, Any], issues: list[CheckIssue]
) -> tuple[PlanSpec | None, list[int] | None]:
    """Validate the plan's shape step by step, so one malformed step does not hide the
    semantic problems of the others. Returns the well-formed part and, when steps had to be
    left out, the original index of each step kept."""
    try:
        return PlanSpec.model_validate(plan), None
    except ValidationError as exc:
        issues.extend(structure_issues(exc))
    raw_steps = plan.get("steps") if isinstance(plan, Mapping) else None
    if not isinstance(raw_steps, list):
        return None, None
    good: list[StepSpec] = []
    original: list[int] = []
    for index, raw in enumerate(raw_steps):
        try:
            good.append(StepSpec.model_validate(raw))
        except ValidationError:
            continue
        original.append(index)
    try:
        partial = PlanSpec.model_validate({**plan, "steps": [s.model_dump() for s in good]})
    except ValidationError:
        return None, None
    return partial, original


def verify_checked(plan: CheckedPlan, verbs: Mapping[str, VerbContract]) -> list[CheckIssue]:
    """Problems that make a pinned plan unusable against the live verbs (empty when fine)."""
    issues: list[CheckIssue] = []
    if plan.computed_digest() != plan.plan_digest:
        issues.append(
            CheckIssue("plan_digest", "does not match the plan's content (edited after checking?)")
        )
    for step in plan.steps:
        where = f"steps[{step.sequence}]"
        _verify_pinned_hash(step.verb, step.contract_hash, f"{where}.contract_hash", verbs, issues)
        if step.compensate is not None:
            _verify_pinned_hash(
                step.compensate.verb,
                step.compensate.contract_hash,
                f"{where}.compensate.contract_hash",
                verbs,
                issues,
            )
    return issues


def _verify_pinned_hash(
    verb: str, pinned: str, where: str, verbs: Mapping[str, VerbContract], issues: list[CheckIssue]
) -> None:
    contract = verbs.get(verb)
    if contract is None:
        issues.append(CheckIssue(where, f"verb {verb!r} is not in the live registry"))
    elif contract.contract_hash != pinned:
        issues.append(
            CheckIssue(where, f"verb {verb!r} changed since the plan was checked (contract drift)")
        )


def structure_issues(error: ValidationError) -> list[CheckIssue]:
    issues = []
    for item in error.errors():
        path = ""
        for part in item["loc"]:
            if isinstance(part, int):
                path = join_path(path, part)
            elif part in {"CompensationSpec", "literal['none']"}:
                continue
            else:
                path = join_path(path, str(part))
        message = item["msg"]
        if item["type"] == "missing" and path.endswith(".compensate"):
            message = 'missing: give {"verb": …, "args": …}, or "none" when nothing needs undoing'
        elif item["type"] == "missing":
            message = "missing"
        elif item["type"] == "too_short" and path == "steps":
            message = "a plan needs at least one step"
        issues.append(CheckIssue(path, message))
    return _dedupe(issues)


def _dedupe(issues: list[CheckIssue]) -> list[CheckIssue]:
    seen: set[CheckIssue] = set()
    return [issue for issue in issues if not (issue in seen or seen.add(issue))]  # type: ignore[func-returns-value]


@dataclass(frozen=True)
class _Scope:
    """What the check of every step reads, and the issues it adds to."""

    spec: PlanSpec
    verbs: Mapping[str, VerbContract]
    positions: Mapping[str, int]  # each valid, first-seen step id's index in spec.steps
    broken_steps: bool  # malformed steps were left out: a missing step may be one of them
    issues: list[CheckIssue]
    # With `after` anywhere: each step's transitive dependencies, the only steps whose
    # results it may use. None for a sequential plan, where that is every earlier step.
    runs_before: Mapping[str, frozenset[str]] | None


def _step_ids(
    plan: PlanSpec | Mapping[str, Any], spec: PlanSpec, original: list[int] | None
) -> list[tuple[int, str]]:
    """Every step's id with its index in the plan, a malformed step's too (when its id is
    text), so that a repeated or invalid id is reported with that step's other problems."""
    if original is None or not isinstance(plan, Mapping):
        return [(index, step.id) for index, step in enumerate(spec.steps)]
    raw_steps = plan.get("steps")
    return [
        (index, raw["id"])
        for index, raw in enumerate(raw_steps if isinstance(raw_steps, list) else ())
        if isinstance(raw, Mapping) and isinstance(raw.get("id"), str)
    ]


def _check_semantics(
    spec: PlanSpec,
    verbs: Mapping[str, VerbContract],
    issues: list[CheckIssue],
    original: list[int] | None,
    ids: list[tuple[int, str]],
) -> CheckedPlan | None:
    """Semantic checks. ``original`` is set when malformed steps were left out: it maps each
    kept step to its index in the plan, and references to unknown steps are then not trusted.
    ``ids``: every step's id by its index in the plan (``_step_ids``), malformed steps' too."""
    index_of = original or list(range(len(spec.steps)))
    _check_names(spec, issues)
    positions = _step_positions(ids, index_of, issues)
    sequential = all(step.after is None for step in spec.steps)
    if not sequential:
        issues.extend(after_issues(spec.steps, index_of, positions, original is None))
    before = None if sequential else runs_before(spec.steps)
    scope = _Scope(spec, verbs, positions, original is not None, issues, before)
    checked_steps = []
    for index, step in enumerate(spec.steps):
        checked = _check_step(step, index, f"steps[{index_of[index]}]", scope)
        if checked is not None:
            checked_steps.append(checked)
    if issues:
        return None
    body: dict[str, JsonValue] = {
        "format": CHECKED_PLAN_FORMAT,
        "plan_id": spec.plan_id,
        "facts": {name: kind.value for name, kind in spec.facts.items()},
        "steps": [step.model_dump(mode="json") for step in checked_steps],
    }
    return CheckedPlan.model_validate({**body, "plan_digest": canonical_hash(body)})


def _check_names(spec: PlanSpec, issues: list[CheckIssue]) -> None:
    if not IDENTIFIER.fullmatch(spec.plan_id):
        issues.append(CheckIssue("plan_id", _IDENTIFIER_RULE))
    for fact in spec.facts:
        if not IDENTIFIER.fullmatch(fact) and not fact.isidentifier():
            issues.append(CheckIssue(join_path("facts", fact), "fact names must be identifiers"))


def _step_positions(
    ids: list[tuple[int, str]], index_of: list[int], issues: list[CheckIssue]
) -> dict[str, int]:
    """Where each step id stands in ``spec.steps`` (``index_of`` maps there from the plan);
    an invalid or repeated id is an issue and gets no place. ``ids`` holds malformed steps
    too, so an id repeated by a step left out is reported at once, and claims no place."""
    first: dict[str, int] = {}
    for plan_index, step_id in ids:
        where = f"steps[{plan_index}].id"
        if not IDENTIFIER.fullmatch(step_id):
            issues.append(CheckIssue(where, f"step id {step_id!r} {_IDENTIFIER_RULE}"))
        elif step_id in first:
            issues.append(
                CheckIssue(
                    where, f"duplicate step id {step_id!r} (first at steps[{first[step_id]}])"
                )
            )
        else:
            first[step_id] = plan_index
    kept = {plan_index: index for index, plan_index in enumerate(index_of)}
    return {step_id: kept[at] for step_id, at in first.items() if at in kept}


def _check_step(step: StepSpec, index: int, where: str, scope: _Scope) -> CheckedStep | None:
    """One step and its compensation; the step pinned to its verb's contract when it is live."""
    contract = _contract(step.verb, f"{where}.verb", scope)
    _check_args(step.args, f"{where}.args", index, False, contract, scope)
    compensation = None
    if step.compensate != "none":
        comp = step.compensate
        comp_contract = _contract(comp.verb, f"{where}.compensate.verb", scope)
        _check_args(comp.args, f"{where}.compensate.args", index, True, comp_contract, scope)
        if comp_contract is not None:
            compensation = CheckedCompensation(
                verb=comp.verb, contract_hash=comp_contract.contract_hash, args=comp.args
            )
    if contract is None:
        return None
    return CheckedStep(
        id=step.id,
        sequence=index,
        verb=step.verb,
        contract_hash=contract.contract_hash,
        args=step.args,
        compensate=compensation,
        after=None if step.after is None else tuple(step.after),
    )


def _contract(name: str, where: str, scope: _Scope) -> VerbContract | None:
    contract = scope.verbs.get(name)
    if contract is None:
        known = ", ".join(sorted(scope.verbs)) or "none configured"
        scope.issues.append(CheckIssue(where, f"unknown verb {name!r} (known: {known})"))
    return contract


def _check_args(
    args: dict[str, Any],
    where: str,
    index: int,
    is_compensation: bool,
    contract: VerbContract | None,
    scope: _Scope,
) -> None:
    refs, problems = scan(args, where)
    scope.issues.extend(issues_from(problems))
    for ref in refs:
        scope.issues.extend(_reference_issues(ref, index, is_compensation, scope))
    if contract is None:
        return
    scope.issues.extend(_template_issues(contract, args, where, scope.spec.facts))
    if contract.args_schema is not None:
        scope.issues.extend(literal_schema_issues(args, contract.args_schema, where))


def _reference_issues(
    ref: Reference, index: int, is_compensation: bool, scope: _Scope
) -> list[CheckIssue]:
    """A $fact that is not declared, or a $result of a step that does not run before."""
    if isinstance(ref, FactRef):
        if ref.name not in scope.spec.facts:
            return [CheckIssue(ref.where, f"fact {ref.name!r} is not declared")]
    elif isinstance(ref, ResultRef):
        target = scope.positions.get(ref.step)
        if target is None:
            if not scope.broken_steps:
                return [CheckIssue(ref.where, f"$result refers to missing step {ref.step!r}")]
        elif not _runs_before(ref.step, target, index, is_compensation, scope):
            hint = "" if scope.runs_before is None else " (name it in `after`, or a step after it)"
            return [
                CheckIssue(
                    ref.where,
                    f"$result refers to step {ref.step!r}, which does not run before this one"
                    + hint,
                )
            ]
    return []


def _runs_before(name: str, target: int, index: int, is_compensation: bool, scope: _Scope) -> bool:
    """Whether step ``name`` (at ``target``) has succeeded whenever the step at ``index``
    (or, for its compensation, that step itself) runs."""
    if target == index:
        return is_compensation
    if scope.runs_before is None:
        return target < index
    return name in scope.runs_before.get(scope.spec.steps[index].id, frozenset())


def _template_issues(
    contract: VerbContract, args: dict[str, Any], where: str, facts: Collection[str]
) -> list[CheckIssue]:
    """The verb's path (and its probe's) and fencing templates: each placeholder fillable by
    this step, each literal argument usable where it goes, and no rendering already past its
    limit."""
    issues: list[CheckIssue] = []
    templates = [(template, True) for template in contract.path_templates]
    templates += [(template, False) for template in contract.fencing_templates]
    for template, is_path in templates:
        issues.extend(_rendered_length_issues(template, is_path, args, where))
        for placeholder in template.placeholders:
            name, needs = placeholder.name, f"verb {contract.name!r} needs"
            if placeholder.scope == "facts" and name not in facts:
                issues.append(
                    CheckIssue(
                        where,
                        f"{needs} fact {name!r} for template {template.source!r}, "
                        "which is not declared",
                    )
                )
            elif placeholder.scope == "args" and name not in args:
                issues.append(
                    CheckIssue(where, f"{needs} argument {name!r} for template {template.source!r}")
                )
            elif placeholder.scope == "args" and not scan(args[name], where)[0]:
                # a literal; a reference is filled when the step runs
                issues.extend(_template_value_issues(template, is_path, name, args[name], where))
    return issues


def _rendered_length_issues(
    template: Template, is_path: bool, args: dict[str, Any], where: str
) -> list[CheckIssue]:
    """A template whose literal arguments alone already render past its limit: the rest of
    the rendering (facts, results) can only make it longer."""
    known = template.literal_length
    for placeholder in template.placeholders:
        value = args.get(placeholder.name)
        if placeholder.scope != "args" or placeholder.name not in args or scan(value, where)[0]:
            continue
        literal = resolve(value, {}, {})
        if isinstance(literal, bool) or not isinstance(literal, str | int):
            continue  # reported by _template_value_issues
        try:
            known += len(encode_path_segment(str(literal)) if is_path else str(literal))
        except TemplateError:
            continue  # reported by _template_value_issues
    limit, what = (
        (MAX_PATH_CHARS, "path") if is_path else (MAX_FENCING_RESOURCE_CHARS, "fencing resource")
    )
    if known <= limit:
        return []
    return [
        CheckIssue(
            where,
            f"template {template.source!r}: the rendered {what} would be at least {known} "
            f"characters, over the limit of {limit}",
        )
    ]


def _template_value_issues(
    template: Template, is_path: bool, name: str, value: JsonValue, where: str
) -> list[CheckIssue]:
    """A literal argument that fills a path or fencing template must be usable there."""
    literal = resolve(value, {}, {})
    here = join_path(where, name)
    if isinstance(literal, bool) or not isinstance(literal, str | int):
        return [
            CheckIssue(here, f"fills template {template.source!r}: must be a string or an integer")
        ]
    if is_path:
        try:
            encode_path_segment(str(literal))
        except TemplateError as exc:
            return [CheckIssue(here, f"fills template {template.source!r}: {exc}")]
    return []

"""check(plan, verbs): a CheckedPlan, or every problem at once (docs/design.md section 4)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema
from pydantic import ValidationError

from effectusd.core.canonical import (
    MAX_FACTS_BYTES,
    MAX_FENCING_RESOURCE_CHARS,
    MAX_PATH_CHARS,
    MAX_PLAN_BYTES,
    JsonValue,
    canonical_bytes,
    canonical_hash,
    join_path,
    json_problems,
    nesting_exceeded,
    size_problem,
)
from effectusd.core.contracts import VerbContract
from effectusd.core.errors import EffectusError
from effectusd.core.expressions import FactRef, ResultRef, resolve, scan
from effectusd.core.plan import (
    CHECKED_PLAN_FORMAT,
    CheckedCompensation,
    CheckedPlan,
    CheckedStep,
    FactType,
    PlanSpec,
    StepSpec,
)
from effectusd.core.templates import Template, TemplateError, encode_path_segment

# Ids travel in HTTP headers, so they are restricted to a safe ASCII alphabet.
IDENTIFIER = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,127}$")
_IDENTIFIER_RULE = "must start with a letter and use only letters, digits, '_', '.', '-' (≤128)"


@dataclass(frozen=True)
class CheckIssue:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class PlanCheckError(EffectusError, ValueError):
    """The plan cannot be used; ``issues`` lists every problem found."""

    def __init__(self, issues: list[CheckIssue]) -> None:
        self.issues = issues
        super().__init__("\n".join(str(issue) for issue in issues))


def check(plan: PlanSpec | Mapping[str, Any], verbs: Mapping[str, VerbContract]) -> CheckedPlan:
    """Check a plan against the live verbs; raise PlanCheckError listing every problem."""
    issues: list[CheckIssue] = []
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
    checked = _check_semantics(spec, verbs, issues, original)
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


def document_issues(
    value: object, path: str, limit: int | None = None, what: str = ""
) -> list[CheckIssue]:
    """Why ``value`` cannot be accepted as one JSON document: not canonical JSON, nested too
    deeply, or over ``limit`` bytes."""
    problems = json_problems(value, path)
    if not problems and limit is not None:
        too_big = size_problem(canonical_bytes(value, path), limit, what)
        problems = [] if too_big is None else [too_big]
    return _split(problems)


def _split(problems: list[str]) -> list[CheckIssue]:
    issues = []
    for problem in problems:
        path, _, message = problem.rpartition(": ")
        issues.append(CheckIssue(path, message))
    return issues


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
        issues.append(CheckIssue(path, message))
    return _dedupe(issues)


def _dedupe(issues: list[CheckIssue]) -> list[CheckIssue]:
    seen: set[CheckIssue] = set()
    return [issue for issue in issues if not (issue in seen or seen.add(issue))]  # type: ignore[func-returns-value]


def _check_semantics(
    spec: PlanSpec,
    verbs: Mapping[str, VerbContract],
    issues: list[CheckIssue],
    original: list[int] | None = None,
) -> CheckedPlan | None:
    """Semantic checks. ``original`` is set when malformed steps were left out: it maps each
    kept step to its index in the plan, and references to unknown steps are then not trusted."""
    broken_steps = original is not None
    index_of = original or list(range(len(spec.steps)))
    if not IDENTIFIER.fullmatch(spec.plan_id):
        issues.append(CheckIssue("plan_id", _IDENTIFIER_RULE))
    for fact in spec.facts:
        if not IDENTIFIER.fullmatch(fact) and not fact.isidentifier():
            issues.append(CheckIssue(join_path("facts", fact), "fact names must be identifiers"))

    positions: dict[str, int] = {}
    for index, step in enumerate(spec.steps):
        where = f"steps[{index_of[index]}].id"
        if not IDENTIFIER.fullmatch(step.id):
            issues.append(CheckIssue(where, f"step id {step.id!r} {_IDENTIFIER_RULE}"))
        elif step.id in positions:
            first = index_of[positions[step.id]]
            issues.append(
                CheckIssue(where, f"duplicate step id {step.id!r} (first at steps[{first}])")
            )
        else:
            positions[step.id] = index

    checked_steps = []
    for index, step in enumerate(spec.steps):
        where = f"steps[{index_of[index]}]"
        contract = _contract(step.verb, verbs, f"{where}.verb", issues)
        _check_args(
            step.args,
            f"{where}.args",
            index,
            False,
            spec,
            positions,
            contract,
            issues,
            broken_steps,
        )
        compensation = None
        if step.compensate != "none":
            comp = step.compensate
            comp_contract = _contract(comp.verb, verbs, f"{where}.compensate.verb", issues)
            _check_args(
                comp.args,
                f"{where}.compensate.args",
                index,
                True,
                spec,
                positions,
                comp_contract,
                issues,
                broken_steps,
            )
            if comp_contract is not None:
                compensation = CheckedCompensation(
                    verb=comp.verb, contract_hash=comp_contract.contract_hash, args=comp.args
                )
        if contract is not None:
            checked_steps.append(
                CheckedStep(
                    id=step.id,
                    sequence=index,
                    verb=step.verb,
                    contract_hash=contract.contract_hash,
                    args=step.args,
                    compensate=compensation,
                )
            )
    if issues:
        return None
    body: dict[str, JsonValue] = {
        "format": CHECKED_PLAN_FORMAT,
        "plan_id": spec.plan_id,
        "facts": {name: kind.value for name, kind in spec.facts.items()},
        "steps": [step.model_dump(mode="json") for step in checked_steps],
    }
    return CheckedPlan.model_validate({**body, "plan_digest": canonical_hash(body)})


def _contract(
    name: str, verbs: Mapping[str, VerbContract], where: str, issues: list[CheckIssue]
) -> VerbContract | None:
    contract = verbs.get(name)
    if contract is None:
        known = ", ".join(sorted(verbs)) or "none configured"
        issues.append(CheckIssue(where, f"unknown verb {name!r} (known: {known})"))
    return contract


def _check_args(
    args: dict[str, Any],
    where: str,
    index: int,
    is_compensation: bool,
    spec: PlanSpec,
    positions: Mapping[str, int],
    contract: VerbContract | None,
    issues: list[CheckIssue],
    broken_steps: bool = False,
) -> None:
    refs, problems = scan(args, where)
    issues.extend(_split(problems))
    for ref in refs:
        if isinstance(ref, FactRef):
            if ref.name not in spec.facts:
                issues.append(CheckIssue(ref.where, f"fact {ref.name!r} is not declared"))
        elif isinstance(ref, ResultRef):
            target = positions.get(ref.step)
            if target is None:
                if not broken_steps:
                    issues.append(
                        CheckIssue(ref.where, f"$result refers to missing step {ref.step!r}")
                    )
            elif target > index or (target == index and not is_compensation):
                issues.append(
                    CheckIssue(
                        ref.where,
                        f"$result refers to step {ref.step!r}, which does not run before this one",
                    )
                )
    if contract is None:
        return
    templates = [(contract.path_template, True)]
    templates += [(template, False) for template in contract.fencing_templates]
    for template, is_path in templates:
        issues.extend(_rendered_length_issues(template, is_path, args, where))
        for placeholder in template.placeholders:
            value = args.get(placeholder.name)
            if (
                placeholder.scope == "args"
                and placeholder.name in args
                and not scan(value, where)[0]
            ):
                issues.extend(
                    _template_value_issues(template, is_path, placeholder.name, value, where)
                )
            if placeholder.scope == "args" and placeholder.name not in args:
                issues.append(
                    CheckIssue(
                        where,
                        f"verb {contract.name!r} needs argument {placeholder.name!r} "
                        f"for template {template.source!r}",
                    )
                )
            if placeholder.scope == "facts" and placeholder.name not in spec.facts:
                issues.append(
                    CheckIssue(
                        where,
                        f"verb {contract.name!r} needs fact {placeholder.name!r} "
                        f"for template {template.source!r}, which is not declared",
                    )
                )
    if contract.args_schema is not None:
        issues.extend(literal_schema_issues(args, contract.args_schema, where))


def literal_schema_issues(
    args: dict[str, Any], schema: dict[str, Any], where: str
) -> list[CheckIssue]:
    """Schema violations visible before references are resolved: the whole object when it is
    all literal; otherwise each literal member, required names and unexpected names."""
    refs, _ = scan(args, where)
    if not refs:
        return schema_issues(resolve(args, {}, {}), schema, where)
    properties = schema.get("properties", {})
    issues = []
    for name, value in args.items():
        sub_refs, _ = scan(value, where)
        if not sub_refs and isinstance(properties.get(name), dict):
            issues.extend(
                schema_issues(resolve(value, {}, {}), properties[name], join_path(where, name))
            )
    for name in schema.get("required", []):
        if name not in args:
            issues.append(CheckIssue(where, f"schema: {name!r} is a required property"))
    if schema.get("additionalProperties") is False:
        for name in args:
            if name not in properties:
                issues.append(
                    CheckIssue(join_path(where, name), "schema: additional property not allowed")
                )
    return issues


def schema_issues(value: JsonValue, schema: dict[str, Any], where: str) -> list[CheckIssue]:
    validator = jsonschema.Draft202012Validator(schema)
    issues = []
    for error in sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path)):
        path = where
        for part in error.absolute_path:
            path = join_path(path, part)
        issues.append(CheckIssue(path, f"schema: {_schema_reason(error)}"))
    return issues


# jsonschema's messages for these quote only names: schema property names, or the names
# (never the values) of the instance's members.
_NAMING_KEYWORDS = frozenset(
    {"required", "dependentRequired", "additionalProperties", "unevaluatedProperties"}
)
_SHOWN_SCHEMA_CHARS = 80


def _schema_reason(error: jsonschema.ValidationError) -> str:
    """What the schema asked for, told from the schema alone: jsonschema's own messages quote
    the instance, and the instance is an argument value (possibly a secret)."""
    keyword = str(error.validator)
    expected = error.validator_value
    if keyword in _NAMING_KEYWORDS:
        return error.message
    if keyword == "type":
        kinds = expected if isinstance(expected, list) else [expected]
        return f"must be of type {' or '.join(str(kind) for kind in kinds)}"
    if isinstance(expected, dict) or (
        isinstance(expected, list) and any(isinstance(item, dict | list) for item in expected)
    ):
        return f"fails {keyword}"  # a subschema: the path already says where
    shown = json.dumps(expected, ensure_ascii=False)
    if len(shown) > _SHOWN_SCHEMA_CHARS:
        shown = shown[: _SHOWN_SCHEMA_CHARS - 1] + "…"
    return f"fails {keyword} {shown}"


def fact_issues(
    declared: Mapping[str, FactType], facts: Mapping[str, JsonValue]
) -> list[CheckIssue]:
    """Facts supplied at submit must match the declared names and JSON types exactly."""
    issues = document_issues(dict(facts), "facts", MAX_FACTS_BYTES, "facts")
    if nesting_exceeded([str(issue) for issue in issues]):
        return issues
    for name, kind in declared.items():
        if name not in facts:
            issues.append(
                CheckIssue(join_path("facts", name), f"declared {kind.value} fact is missing")
            )
        elif not kind.accepts(facts[name]):
            issues.append(
                CheckIssue(
                    join_path("facts", name),
                    f"expected {kind.value}, got {type(facts[name]).__name__}",
                )
            )
    for name in facts:
        if name not in declared:
            issues.append(CheckIssue(join_path("facts", name), "fact is not declared by the plan"))
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
            return [CheckIssue(here, str(exc))]
    return []

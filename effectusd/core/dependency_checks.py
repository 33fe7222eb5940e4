"""The checker's part for ``after`` (docs/design.md section 4, "Parallel steps"): unknown
and repeated ids, and cycles, each reported by path with every other problem of the plan."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from effectusd.core.check_issues import CheckIssue
from effectusd.core.graph import ancestors, cycles, dependencies
from effectusd.core.plan import StepSpec


def after_issues(
    steps: Sequence[StepSpec], index_of: Sequence[int], known: Collection[str], trust_unknown: bool
) -> list[CheckIssue]:
    """Problems of the steps' ``after`` lists. ``index_of`` maps each step to its index in
    the plan as written; ``trust_unknown`` is False when malformed steps were left out (an id
    missing here may be one of theirs)."""
    issues: list[CheckIssue] = []
    for position, step in enumerate(steps):
        if step.after is None:
            continue
        seen: set[str] = set()
        for item, name in enumerate(step.after):
            where = f"steps[{index_of[position]}].after[{item}]"
            if name in seen:
                issues.append(CheckIssue(where, f"step {name!r} is named twice"))
            elif name == step.id:
                issues.append(CheckIssue(where, f"step {name!r} cannot run after itself"))
            elif name not in known and trust_unknown:
                issues.append(CheckIssue(where, f"unknown step {name!r}"))
            seen.add(name)
    issues.extend(_cycle_issues(steps, index_of))
    return issues


def _cycle_issues(steps: Sequence[StepSpec], index_of: Sequence[int]) -> list[CheckIssue]:
    deps = dependencies(steps)
    # A step naming itself is reported above; here only steps that wait for each other.
    without_self = {name: tuple(t for t in targets if t != name) for name, targets in deps.items()}
    where: dict[str, tuple[int, bool]] = {}
    for position, step in enumerate(steps):
        where.setdefault(step.id, (index_of[position], step.after is None))
    issues = []
    for component in cycles(without_self):
        loop = ", ".join(repr(name) for name in component)
        for name in component:
            index, implicit = where[name]
            if implicit:
                issues.append(
                    CheckIssue(
                        f"steps[{index}]",
                        f"runs after the step before it (no `after`), which closes a cycle "
                        f"among {loop}: steps that wait for each other never start",
                    )
                )
            else:
                issues.append(
                    CheckIssue(
                        f"steps[{index}].after",
                        f"closes a cycle among {loop}: steps that wait for each other never start",
                    )
                )
    return issues


def runs_before(steps: Sequence[StepSpec]) -> Mapping[str, frozenset[str]]:
    """Each step id -> the steps certain to have succeeded when it starts (its transitive
    dependencies): the only steps whose ``$result`` it may use."""
    return ancestors(dependencies(steps))

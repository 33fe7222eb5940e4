"""The dependency graph of a plan's steps (docs/design.md section 4, "Parallel steps").

A step runs after the steps named in its ``after``; a step without ``after`` runs after the
step before it in the list (the first one at once), which is what every plan meant before
``after`` existed. The checker and the engine read the graph from here, so both agree on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


class Dependent(Protocol):
    """What the graph reads of a step (a StepSpec or a CheckedStep)."""

    @property
    def id(self) -> str: ...

    @property
    def after(self) -> Sequence[str] | None: ...


def dependencies(steps: Sequence[Dependent]) -> dict[str, tuple[str, ...]]:
    """Each step id -> the ids it runs after, ``after`` made explicit. Unknown ids are kept
    (the checker reports them); a repeated step id keeps its first occurrence."""
    deps: dict[str, tuple[str, ...]] = {}
    for index, step in enumerate(steps):
        if step.id in deps:
            continue
        if step.after is not None:
            deps[step.id] = tuple(dict.fromkeys(step.after))
        else:
            deps[step.id] = (steps[index - 1].id,) if index > 0 else ()
    return deps


def cycles(deps: Mapping[str, Sequence[str]]) -> list[list[str]]:
    """Every set of steps that wait for each other (strongly connected components with a
    cycle), each in plan order; edges to unknown ids are ignored. Tarjan's algorithm,
    iterative: a plan may hold thousands of steps."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    order = {name: position for position, name in enumerate(deps)}
    for root in deps:
        if root in index:
            continue
        work: list[tuple[str, int]] = [(root, 0)]
        while work:
            node, child = work.pop()
            if child == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            targets = [t for t in deps[node] if t in deps]
            if child < len(targets):
                work.append((node, child + 1))
                target = targets[child]
                if target not in index:
                    work.append((target, 0))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in deps[node]:
                    found.append(sorted(component, key=order.__getitem__))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return sorted(found, key=lambda component: order[component[0]])


def ancestors(deps: Mapping[str, Sequence[str]]) -> dict[str, frozenset[str]]:
    """Each step id -> every step it transitively runs after (unknown ids ignored; on a
    cycle, its members are each other's ancestors: the checker has refused the plan)."""
    found: dict[str, frozenset[str]] = {}
    for start in deps:
        seen: set[str] = set()
        todo = [t for t in deps[start] if t in deps]
        while todo:
            node = todo.pop()
            if node in seen:
                continue
            seen.add(node)
            if node in found:
                seen |= found[node]
                continue
            todo.extend(t for t in deps[node] if t in deps)
        found[start] = frozenset(seen)
    return found


@dataclass(frozen=True)
class PlanGraph:
    """A checked (acyclic) plan's graph, as the engine reads it."""

    order: tuple[str, ...]  # the step ids in plan order
    deps: Mapping[str, tuple[str, ...]]
    descendants: Mapping[str, frozenset[str]]  # every step that transitively runs after

    @property
    def roots(self) -> tuple[str, ...]:
        """The steps that depend on none: a submit enqueues them all (for a sequential plan,
        the first step only)."""
        return tuple(name for name in self.order if not self.deps[name])

    @classmethod
    def of(cls, steps: Sequence[Dependent]) -> PlanGraph:
        deps = dependencies(steps)
        below: dict[str, set[str]] = {name: set() for name in deps}
        for name, above in ancestors(deps).items():
            for ancestor in above:
                below[ancestor].add(name)
        return cls(tuple(deps), deps, {name: frozenset(found) for name, found in below.items()})

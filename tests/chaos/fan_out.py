"""The fan-out scenario's plans and the invariants only parallel steps need (issue 17,
docs/design.md section 4 "Parallel steps").

Each saga: s1, then s2, s3 and s4 together, then s5 after all three. Every ``fail_every``th
saga fails s3 permanently, so its siblings are canceled (not sent yet) or waited for (in
flight), and what succeeded is compensated. Checked over the whole history of the run: a step
started only once every step it runs after had succeeded; only steps that succeeded were
compensated; compensation ran in the reverse of the order the steps succeeded and never
before a step that depends on it; a canceled sibling sent nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from effectusd.core.plan import CheckedPlan
from effectusd.core.states import StepState
from effectusd.store.rows import plan_steps, steps_by_saga

Rows = Callable[[str, str], list[dict[str, Any]]]

AFTER = {"s1": [], "s2": ["s1"], "s3": ["s1"], "s4": ["s1"], "s5": ["s2", "s3", "s4"]}


def descendants(name: str) -> set[str]:
    found: set[str] = set()
    for step, deps in AFTER.items():
        if name in deps:
            found |= {step} | descendants(step)
    return found


def plan(destination: str, index: int, fail_every: int) -> tuple[str, dict[str, Any]]:
    fail = fail_every > 0 and index % fail_every == 0
    steps = [
        {
            "id": name,
            "verb": f"{destination}.do",
            "args": {"i": name, "fail": fail and name == "s3"},
            "compensate": {"verb": f"{destination}.undo", "args": {"i": name}},
            "after": after,
        }
        for name, after in AFTER.items()
    ]
    return f"f-{index}", {"plan_id": "chaos-fan-out", "steps": steps}


def check(violations: list[str], url: str, rows: Rows) -> None:
    # a saga's steps are its pinned plan's, each one's state derived from its dispatches
    # (effectusd/core/steps.py), its order of success its forward dispatch's (migration 10016)
    read = steps_by_saga(
        rows(
            url,
            "SELECT saga_id, effect_id, direction, state, uncertain_attempt IS NOT NULL AS"
            " uncertain, result, succeeded_order FROM effectus_saga_outbox UNION ALL"
            " SELECT saga_id, effect_id, NULL, state, false, NULL, NULL FROM effectus_saga_steps",
        )
    )
    orders: dict[str, dict[str, int | None]] = {}
    for saga in rows(url, "SELECT saga_id, state, plan FROM effectus_saga_instances"):
        plan = saga["plan"]
        document = json.loads(plan) if isinstance(plan, str) else plan
        steps = plan_steps(CheckedPlan.model_validate(document), read.get(saga["saga_id"], ()))
        for step in steps.values():
            orders.setdefault(saga["saga_id"], {})[step.effect_id] = step.succeeded_order
            if saga["state"] in ("compensated", "failed") and step.state is StepState.SUCCEEDED:
                violations.append(
                    f"saga {saga['saga_id'][:12]} ended {saga['state']} with "
                    f"{step.effect_id} succeeded and never compensated"
                )
    dispatches = rows(
        url,
        """
        SELECT o.saga_id, o.effect_id, o.direction, o.state, o.attempt,
               (SELECT max(a.completed_at) FROM effectus_saga_attempts a
                WHERE a.dispatch_id = o.dispatch_id) AS completed_at,
               (SELECT count(*) FROM effectus_saga_attempts a
                WHERE a.dispatch_id = o.dispatch_id AND a.sent_at IS NOT NULL) AS sent
        FROM effectus_saga_outbox o ORDER BY o.saga_id, o.dispatch_id""",
    )
    undone: dict[str, list[tuple[Any, str]]] = {}
    for d in dispatches:
        saga, effect, order = d["saga_id"], d["effect_id"], orders[d["saga_id"]]
        where = f"saga {saga[:12]} {effect}/{d['direction']}"
        if d["direction"] == "forward":
            missing = [dep for dep in AFTER[effect] if order.get(dep) is None]
            if missing:
                violations.append(f"{where} started before {missing} succeeded")
            if d["state"] == "canceled" and int(d["sent"]):
                violations.append(f"{where} was canceled after it may have been sent")
            continue
        if order.get(effect) is None:
            violations.append(f"{where}: a step that never succeeded was compensated")
        if d["state"] == "succeeded":
            undone.setdefault(saga, []).append((d["completed_at"], effect))
    for saga, done in undone.items():
        sequence = [effect for _, effect in sorted(done)]
        succeeded = [orders[saga][effect] or 0 for effect in sequence]
        if succeeded != sorted(succeeded, reverse=True):
            violations.append(
                f"saga {saga[:12]} compensated {sequence}: not the reverse of success order"
            )
        for position, effect in enumerate(sequence):
            early = descendants(effect) & set(sequence[position + 1 :])
            if early:
                violations.append(
                    f"saga {saga[:12]} compensated {effect} before its dependents {sorted(early)}"
                )

"""adopt-contract: re-pin a saga blocked on contract drift to the loaded contracts, with the
operator's evidence on the timeline, and resume it as ``retry`` does. One guarded
transaction per saga (see common.lock_saga); a refusal writes nothing for that saga.

What is re-pinned: the saga's stored plan (new digest, see core.adoption), which is where its
steps' contract hashes and compensations are read from, and the dispatch the pre-dispatch guard
stopped, if there is one (rebuilt under the adopted contract with the same arguments and
idempotency key). Its key never changes, so the destination still deduplicates the call.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from effectusd.backends.operation import Operation
from effectusd.core.adoption import adopt, drifted_verbs
from effectusd.core.canonical import canonical_text, printable_lines
from effectusd.core.engine import resume_enqueue
from effectusd.core.enqueue import build_dispatch
from effectusd.core.expressions import ResolutionError
from effectusd.core.operator_decisions import Action, RefusalKind, Refused, operator_text
from effectusd.core.registry import Registry
from effectusd.core.states import DispatchState, SagaState
from effectusd.operator.actions import _enqueue_now, _send_again
from effectusd.operator.locked_saga import Locked, lock_saga
from effectusd.operator.report import ActionReport
from effectusd.store.operations import event


class NotBlockedOnVerb(Refused):
    """The saga is blocked_contract, but adopting the given verb would not unblock it."""

    def __init__(self, message: str) -> None:
        super().__init__(RefusalKind.CONFLICT, message)


def adopt_contract(
    saga_id: str,
    *,
    registry: Registry,
    actor: str,
    evidence: str,
    verb: str | None = None,
) -> Operation[ActionReport]:
    """Adopt the loaded contract of ``verb`` (default: of every drifted verb of the saga)."""
    operator_text(actor, evidence)
    locked = yield from lock_saga(saga_id)
    adopting = _verbs_to_adopt(locked, registry, verb)
    adoption = adopt(saga_id, locked.saga.plan, registry.verbs, adopting)
    blocked = [d for d in locked.dispatches if d.state is DispatchState.BLOCKED_CONTRACT]
    if blocked and blocked[0].verb not in adopting:
        raise NotBlockedOnVerb(
            f"saga {saga_id} is blocked on verb {blocked[0].verb!r}"
            + ("" if blocked[0].verb in registry.verbs else ", which is not in the loaded config")
        )
    adopted = replace(locked, saga=replace(locked.saga, plan=adoption.plan))
    if blocked:
        yield from _rebuild_dispatch(adopted, blocked[0].dispatch_id, registry)
    else:
        resumed = resume_enqueue(adopted.saga, registry, actor)
        if resumed.saga is not None and resumed.saga.state is SagaState.BLOCKED_CONTRACT:
            raise NotBlockedOnVerb(
                f"saga {saga_id} would stay blocked_contract: {resumed.saga.stop_reason}"
            )
    updated = yield (
        "op_adopt_plan",
        {
            "saga_id": saga_id,
            "plan": canonical_text(adoption.plan.document()),
            "plan_digest": adoption.plan.plan_digest,
        },
    )
    if not updated:  # cannot happen under the saga lock; refuse rather than guess
        raise Refused(RefusalKind.CONFLICT, f"saga {saga_id} changed while it was adopted")
    detail: dict[str, Any] = {
        "verbs": adoption.verbs,
        "repinned": [r.as_dict() for r in adoption.repins],
        "plan_digest": {"from": locked.saga.plan.plan_digest, "to": adoption.plan.plan_digest},
    }
    yield event(saga_id, "contract_adopted", actor, evidence=evidence, detail=detail)
    action = Action.ADOPT_CONTRACT
    if blocked:
        report = yield from _send_again(
            adopted, blocked[0], action, "send_again", registry, actor, evidence
        )
    else:
        report = yield from _enqueue_now(adopted, action, registry, actor, evidence)
    report.detail = {**report.detail, **detail}
    return report


def _verbs_to_adopt(locked: Locked, registry: Registry, verb: str | None) -> list[str]:
    """``verb``, or every drifted verb of the saga; refused unless it is blocked_contract."""
    saga_id = locked.saga_id
    if locked.state is not SagaState.BLOCKED_CONTRACT:
        raise Refused(
            RefusalKind.CONFLICT,
            f"saga {saga_id} is {locked.state.value}, not blocked_contract: "
            "adopt-contract does not apply",
        )
    if verb is not None and verb not in registry.verbs:
        raise Refused(RefusalKind.CONFLICT, f"verb {verb!r} is not in the loaded config")
    drifted = drifted_verbs(locked.saga.plan, registry.verbs)
    if verb is not None and verb not in drifted:
        raise NotBlockedOnVerb(
            f"saga {saga_id} pins the loaded contract of {verb!r} (or does not use it)"
        )
    return [verb] if verb is not None else drifted


def _rebuild_dispatch(locked: Locked, dispatch_id: int, registry: Registry) -> Operation[None]:
    """Rewrite the stopped dispatch row under the adopted contract. Its arguments are resolved
    again from the saga's facts and results (they are what they were), then checked against
    the adopted schema; the path and fencing resources are rendered from the adopted
    templates. The locked row is updated in place, as ``_send_again`` reads it next."""
    row = locked.dispatch_rows[dispatch_id]
    target = next(d for d in locked.dispatches if d.dispatch_id == dispatch_id)
    step = locked.saga.plan.step(target.effect_id)
    results = {s.effect_id: s.result for s in locked.saga.steps.values() if s.result is not None}
    try:
        spec = build_dispatch(
            locked.saga, step, target.direction, registry, locked.saga.facts, results
        )
    except ResolutionError as exc:
        raise Refused(RefusalKind.CONFLICT, f"under the loaded contract, {exc}") from None
    where = f"{target.effect_id}/{target.direction.value}"
    if spec.args_hash != row["args_hash"]:
        raise Refused(
            RefusalKind.CONFLICT,
            f"{where}: its arguments resolve differently now; adopting would change the call",
        )
    if spec.destination != row["destination"] and target.uncertain_attempt is not None:
        raise Refused(
            RefusalKind.CONFLICT,
            f"{where}: attempt {target.uncertain_attempt} may have committed at destination "
            f"{row['destination']!r}; the adopted contract sends to {spec.destination!r}",
        )
    params = {
        "dispatch_id": dispatch_id,
        "contract_hash": spec.contract_hash,
        "destination": spec.destination,
        "delivery": spec.delivery,
        "method": spec.method,
        "path": spec.path,
        "fencing_resources": canonical_text(spec.fencing_resources),
        "timeout_ms": spec.timeout_ms,
    }
    updated = yield ("op_adopt_dispatch", params)
    if not updated:
        raise Refused(RefusalKind.CONFLICT, f"{where} changed while it was adopted")
    row.update(params)
    row["fencing_resources"] = spec.fencing_resources


# -- every saga blocked on one verb --------------------------------------------------------


@dataclass
class VerbAdoptionReport:
    """What ``adopt-contract --verb`` did: one ActionReport per adopted saga, and why each
    other blocked_contract saga was left alone (refused, or blocked on another verb)."""

    verb: str
    actor: str
    evidence: str
    adopted: list[ActionReport] = field(default_factory=list)
    refused: list[dict[str, str]] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)  # blocked on another verb

    @property
    def ok(self) -> bool:
        return not self.refused

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "action": Action.ADOPT_CONTRACT.value,
            "verb": self.verb,
            "actor": self.actor,
            "evidence": self.evidence,
            "adopted": [report.as_dict() for report in self.adopted],
            "refused": self.refused,
            "skipped": self.skipped,
        }

    def summary(self) -> str:
        lines = [f"adopt-contract {self.verb}: {len(self.adopted)} saga(s) adopted"]
        lines += [f"  adopted   {r.saga_id}  → {r.saga_state['to']}" for r in self.adopted]
        lines += [f"  refused   {r['saga_id']}: {r['error']}" for r in self.refused]
        lines += [f"  skipped   {r['saga_id']}: {r['error']}" for r in self.skipped]
        lines.append(f"  by        {self.actor}: {self.evidence}")
        return printable_lines(lines)  # stop reasons and errors may quote destinations


def candidates() -> Operation[list[str]]:
    """Every blocked_contract saga; ``adopt_contract(verb=...)`` tells which are on the verb."""
    rows = yield ("op_adopt_candidates", {})
    return [row["saga_id"] for row in rows]

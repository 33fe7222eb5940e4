"""adopt-contract: move a saga blocked on contract drift to the contracts loaded now.

Pure: the operator operation locks the saga, asks here for the re-pinned plan, writes it and
then resumes the saga as ``retry`` would. The plan is re-pinned, not annotated: its digest is
recomputed over the new hashes, so the stored plan stays a plan that checks against the live
registry (the old and new digests go on the timeline with the operator's evidence).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from effectusd.core import contracts
from effectusd.core.canonical import JsonValue, canonical_hash
from effectusd.core.contracts import VerbContract
from effectusd.core.operator_decisions import RefusalKind, Refused
from effectusd.core.plan import CheckedCompensation, CheckedPlan, CheckedStep
from effectusd.core.states import Direction


@dataclass(frozen=True)
class Repin:
    effect_id: str
    direction: Direction
    verb: str
    from_hash: str
    to_hash: str

    def as_dict(self) -> dict[str, JsonValue]:
        return {
            "effect_id": self.effect_id,
            "direction": self.direction.value,
            "verb": self.verb,
            "from": self.from_hash,
            "to": self.to_hash,
        }


@dataclass(frozen=True)
class Adoption:
    plan: CheckedPlan
    repins: tuple[Repin, ...]

    @property
    def verbs(self) -> list[str]:
        return sorted({r.verb for r in self.repins})


def drifted_verbs(plan: CheckedPlan, verbs: Mapping[str, VerbContract]) -> list[str]:
    """The configured verbs of ``plan`` whose pinned hash the loaded contract does not match."""
    found = set()
    for step in plan.steps:
        pins = [(step.verb, step.contract_hash)]
        if step.compensate is not None:
            pins.append((step.compensate.verb, step.compensate.contract_hash))
        for verb, pinned in pins:
            live = verbs.get(verb)
            if live is not None and not contracts.pinned(live, pinned):
                found.add(verb)
    return sorted(found)


def adopt(
    saga_id: str, plan: CheckedPlan, verbs: Mapping[str, VerbContract], adopting: Collection[str]
) -> Adoption:
    """``plan`` with every pin (forward or compensation) of the ``adopting`` verbs moved to the
    loaded contract's hash, and its digest recomputed. Refused when a verb is not configured,
    or when none of its pins differs (then there is nothing to adopt: ``retry`` applies)."""
    for verb in adopting:
        if verb not in verbs:
            raise Refused(
                RefusalKind.CONFLICT,
                f"verb {verb!r} is not in the loaded config: there is no contract to adopt",
            )
    repins: list[Repin] = []
    steps: list[CheckedStep] = []
    for step in plan.steps:
        update: dict[str, object] = {}
        if step.verb in adopting and not contracts.pinned(verbs[step.verb], step.contract_hash):
            live_hash = verbs[step.verb].contract_hash
            repins.append(
                Repin(step.id, Direction.FORWARD, step.verb, step.contract_hash, live_hash)
            )
            update["contract_hash"] = live_hash
        comp = step.compensate
        if (
            comp is not None
            and comp.verb in adopting
            and not contracts.pinned(verbs[comp.verb], comp.contract_hash)
        ):
            live_hash = verbs[comp.verb].contract_hash
            repins.append(
                Repin(step.id, Direction.COMPENSATION, comp.verb, comp.contract_hash, live_hash)
            )
            update["compensate"] = CheckedCompensation(
                verb=comp.verb, contract_hash=live_hash, args=comp.args
            )
        steps.append(step.model_copy(update=update) if update else step)
    if not repins:
        raise Refused(
            RefusalKind.CONFLICT,
            f"saga {saga_id} already pins the loaded contract of "
            f"{', '.join(repr(v) for v in sorted(adopting)) or 'every verb'}: nothing to adopt "
            "(use `effectusd retry`)",
        )
    body = plan.model_copy(update={"steps": tuple(steps)}).body()
    adopted = CheckedPlan.model_validate({**body, "plan_digest": canonical_hash(body)})
    return Adoption(adopted, tuple(repins))

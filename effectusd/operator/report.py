"""What an operator action reports: the --json document and its human summary."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from effectusd.core.canonical import printable_lines
from effectusd.core.transition import Transition
from effectusd.operator.locked_saga import Locked


@dataclass
class ActionReport:
    """What an operator action did (the --json output)."""

    action: str
    saga_id: str
    actor: str
    evidence: str | None
    saga_state: dict[str, str]  # {"from": ..., "to": ...}
    decision: str
    effect_id: str | None = None
    direction: str | None = None
    dispatch_state: dict[str, str] | None = None
    enqueued: list[dict[str, str]] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"ok": True, **asdict(self)}

    def summary(self) -> str:
        where = f" {self.effect_id} ({self.direction})" if self.effect_id else ""
        lines = [f"{self.action}{where}: {self.decision.replace('_', ' ')}"]
        if self.dispatch_state:
            lines.append(f"  dispatch  {self.dispatch_state['from']} → {self.dispatch_state['to']}")
        saga_from, saga_to = self.saga_state["from"], self.saga_state["to"]
        lines.append(
            f"  saga      {self.saga_id}  "
            + (f"{saga_from} → {saga_to}" if saga_from != saga_to else f"still {saga_to}")
        )
        lines += [f"  enqueued  {e['effect_id']} ({e['direction']})" for e in self.enqueued]
        for key, value in self.detail.items():
            lines.append(f"  {key:9} {value}")
        lines.append(f"  by        {self.actor}" + (f": {self.evidence}" if self.evidence else ""))
        return printable_lines(lines)  # stop reasons and errors may quote destinations


def enqueued(transition: Transition) -> list[dict[str, str]]:
    return [
        {"effect_id": s.effect_id, "direction": s.direction, "idempotency_key": s.idempotency_key}
        for s in transition.new_dispatches
    ]


def saga_after(locked: Locked, transition: Transition) -> dict[str, str]:
    after = transition.saga.state if transition.saga is not None else locked.state
    return {"from": locked.state.value, "to": after.value}

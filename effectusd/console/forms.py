"""The action forms of a blocked (or running) saga: which apply, and their markup.

Each posts to /sagas/ID/ACTION with the session's CSRF token; the fields are the API's
(docs/operations.md section 8) and the service checks them as the CLI does. A viewer who may
not act gets no form (``csrf`` None), only the reason.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from effectusd.console.html import Html, hidden, join, options, tag, void
from effectusd.core.operator_decisions import Action, Resolution, allowed_actions, cancel_offered
from effectusd.core.states import Direction, SagaState

DECISIONS = [r.value for r in Resolution]
RESOLVABLE_COMPENSATION = "failed_permanent"
# What a placeholder shows for a property of each JSON Schema type.
EXAMPLE_OF_TYPE: dict[str, Any] = {
    "string": "…",
    "integer": 0,
    "number": 0,
    "boolean": False,
    "object": {},
    "array": [],
    "null": None,
}
Schemas = Mapping[str, Mapping[str, Any] | None]  # a verb's result_schema, by verb


def result_placeholder(effect_id: str, schema: Mapping[str, Any] | None) -> str:
    """What the result box suggests: the shape the verb's result_schema gives its
    properties, else a plain word about the step."""
    properties = (schema or {}).get("properties")
    if isinstance(properties, Mapping) and properties:
        shown = []
        for name, spec in list(properties.items())[:4]:
            kind = spec.get("type") if isinstance(spec, Mapping) else None
            example = EXAMPLE_OF_TYPE.get(kind if isinstance(kind, str) else "", "…")
            shown.append(f"{json.dumps(name)}: {json.dumps(example, ensure_ascii=False)}")
        return "{" + ", ".join(shown) + "} (optional)"
    return f"what {effect_id} returned, as JSON (optional)"


def _evidence(required: bool, hint: str) -> Html:
    box = tag("textarea", "", name="evidence", required=required, placeholder=hint)
    return tag("label", join(["Evidence" + ("" if required else " (optional)"), " ", box]))


def _actor() -> Html:
    box = void("input", name="actor", placeholder="your name", autocomplete="name")
    return tag("label", join(["Who you are (goes on the timeline) ", box]))


def _form(saga_id: str, action: str, csrf: str, fields: Sequence[Any], label: str) -> Html:
    return tag(
        "form",
        join(
            [
                hidden({"csrf": csrf}),
                *fields,
                _actor(),
                tag("button", label, type="submit", name="do", value=action),
            ]
        ),
        method="post",
        action=f"/sagas/{saga_id}/{action}",
        class_="action",
        data_action=action,
    )


def resolve_form(
    saga_id: str, blocking: Mapping[str, Any], csrf: str, schemas: Schemas | None = None
) -> Html:
    effect_id = blocking["effect_id"]
    where = f"{effect_id} ({blocking['direction']})"
    decision = tag("select", options(DECISIONS, None, blank=None), name="decision")
    hint = result_placeholder(effect_id, (schemas or {}).get(blocking.get("verb") or ""))
    result = tag("textarea", "", name="result_json", placeholder=hint)
    fields = [
        tag("strong", f"Resolve {where}"),
        hidden({"effect_id": effect_id, "direction": blocking["direction"]}),
        tag("label", join(["Decision ", decision])),
        tag("label", join(["Result, with committed (JSON) ", result])),
        _evidence(True, "what you checked at the destination"),
    ]
    return _form(saga_id, "resolve", csrf, fields, f"Resolve {effect_id}")


def simple_form(saga_id: str, action: str, csrf: str, evidence_required: bool) -> Html:
    hints = {
        "retry": "why it is safe to send again now",
        "cancel": "why it is canceled",
        "adopt-contract": "why the changed contract is right for this saga",
    }
    fields = [tag("strong", action.replace("-", " ").capitalize())]
    fields.append(_evidence(evidence_required, hints[action]))
    return _form(saga_id, action, csrf, fields, action.replace("-", " ").capitalize())


def resolvable(state: str, blocking: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The blocking dispatches an operator settles with Resolve in ``state`` (the same
    choices `next_actions` lists for the CLI)."""
    if state == "blocked_unknown":
        return list(blocking)
    if state == "blocked_compensation":
        return [
            b
            for b in blocking
            if b["direction"] == "compensation" and b["state"] == RESOLVABLE_COMPENSATION
        ]
    return []


def saga_forms(
    saga_id: str,
    state: str,
    csrf: str,
    cancel_requested: bool,
    blocking: Sequence[Mapping[str, Any]] = (),
) -> Html:
    """The forms for the whole saga (retry, adopt the contract, cancel) that apply: what the
    operator decisions allow in ``state`` (``blocking``: the dispatches that block it)."""
    saga_state = SagaState(state)
    forms = []
    if Action.RETRY in allowed_actions(saga_state):
        forms.append(simple_form(saga_id, "retry", csrf, False))
    if saga_state is SagaState.BLOCKED_CONTRACT:
        forms.append(simple_form(saga_id, "adopt-contract", csrf, True))
    directions = [Direction(b["direction"]) for b in blocking]
    if cancel_offered(saga_state, cancel_requested, directions):
        forms.append(simple_form(saga_id, "cancel", csrf, False))
    return join(forms)


def forms_for(
    saga_id: str,
    state: str,
    blocking: Sequence[Mapping[str, Any]],
    csrf: str,
    cancel_requested: bool,
    schemas: Schemas | None = None,
) -> Html:
    """Every form that applies in ``state``: Resolve per resolvable dispatch, then the rest."""
    resolves = [resolve_form(saga_id, b, csrf, schemas) for b in resolvable(state, blocking)]
    return join([*resolves, saga_forms(saga_id, state, csrf, cancel_requested, blocking)])

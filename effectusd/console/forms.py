"""The action forms of a blocked (or running) saga: which apply, and their markup.

Each posts to /sagas/ID/ACTION with the session's CSRF token; the fields are the API's
(docs/operations.md section 8) and the service checks them as the CLI does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from effectusd.console.html import Html, hidden, join, options, tag, void
from effectusd.core.operator_decisions import Resolution

DECISIONS = [r.value for r in Resolution]


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


def resolve_form(saga_id: str, blocking: Mapping[str, Any], csrf: str) -> Html:
    where = f"{blocking['effect_id']} ({blocking['direction']})"
    decision = tag("select", options(DECISIONS, None, blank=None), name="decision")
    result = tag("textarea", "", name="result_json", placeholder='{"charge": "c-1"} (optional)')
    fields = [
        tag("strong", f"Resolve {where}"),
        hidden({"effect_id": blocking["effect_id"], "direction": blocking["direction"]}),
        tag("label", join(["Decision ", decision])),
        tag("label", join(["Result, with committed (JSON) ", result])),
        _evidence(True, "what you checked at the destination"),
    ]
    return _form(saga_id, "resolve", csrf, fields, f"Resolve {blocking['effect_id']}")


def simple_form(saga_id: str, action: str, csrf: str, evidence_required: bool) -> Html:
    hints = {
        "retry": "why it is safe to send again now",
        "cancel": "why it is canceled",
        "adopt-contract": "why the changed contract is right for this saga",
    }
    fields = [tag("strong", action.replace("-", " ").capitalize())]
    fields.append(_evidence(evidence_required, hints[action]))
    return _form(saga_id, action, csrf, fields, action.replace("-", " ").capitalize())


def forms_for(
    saga_id: str, state: str, blocking: Sequence[Mapping[str, Any]], csrf: str, cancelable: bool
) -> Html:
    """The forms that apply in ``state`` (the same choices `next_actions` lists for the CLI)."""
    forms = []
    if state == "blocked_unknown":
        forms += [resolve_form(saga_id, b, csrf) for b in blocking]
    if state in ("blocked_fence", "blocked_contract", "blocked_compensation"):
        forms.append(simple_form(saga_id, "retry", csrf, False))
    if state == "blocked_contract":
        forms.append(simple_form(saga_id, "adopt-contract", csrf, True))
    if state == "blocked_compensation":
        forms += [
            resolve_form(saga_id, b, csrf)
            for b in blocking
            if b["direction"] == "compensation" and b["state"] == "failed_permanent"
        ]
    if state == "running" and cancelable:
        forms.append(simple_form(saga_id, "cancel", csrf, False))
    return join(forms)

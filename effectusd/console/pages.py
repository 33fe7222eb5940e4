"""The console's pages, server-rendered: overview, blocked work, saga search, one saga.

Lists show no values (see console.service); only a saga's own page shows its facts and step
results, folded away until opened.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from effectusd.console.forms import forms_for
from effectusd.console.html import (
    Html,
    join,
    json_block,
    options,
    render,
    state,
    table,
    tag,
)
from effectusd.console.service import Filters, blocked_summary
from effectusd.core.states import SagaState


def _age(iso: str | None) -> str:
    if not iso:
        return "-"
    try:
        seconds = (datetime.now(UTC) - datetime.fromisoformat(iso)).total_seconds()
    except (TypeError, ValueError):
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{max(seconds, 0):.0f}s"


def saga_link(saga_id: str, text: str | None = None) -> Html:
    return tag("a", text or saga_id[:16] + "…", href=f"/sagas/{quote(saga_id)}", class_="mono")


def overview(data: Mapping[str, Any]) -> Html:
    live = data["live_sagas"]
    finished = data["finished_last_hour"]
    total = sum(finished.values())
    parts = [
        tag("h2", "Live and blocked sagas"),
        table(["state", "sagas"], [(state(s), n) for s, n in sorted(live.items())])
        if live
        else tag("p", "None."),
        tag("h2", "Ready queue"),
        table(
            ["dispatches due now", "oldest waiting"],
            [(data["ready_queue_depth"], f"{data['oldest_ready_age_s']:.1f}s")],
        ),
        tag("h2", "Finished in the last hour"),
        table(
            ["end state", "sagas", "share"],
            [(state(s), n, f"{100 * n / total:.1f}%") for s, n in sorted(finished.items())],
        )
        if total
        else tag("p", "None."),
    ]
    outcomes = data.get("attempt_outcomes_since_start")
    if outcomes is not None:
        count = sum(outcomes.values())
        parts += [
            tag("h2", "Attempt outcomes since this daemon started"),
            table(
                ["outcome", "attempts", "rate"],
                [(o, n, f"{100 * n / count:.1f}%") for o, n in sorted(outcomes.items())],
            )
            if count
            else tag("p", "None yet."),
        ]
    return join(parts)


def _blocking_table(blocking: Sequence[Mapping[str, Any]]) -> Html:
    rows = []
    for b in blocking:
        attempts = [
            f"#{a['attempt']} {a['outcome'] or 'pending'}"
            + (f" HTTP {a['status_code']}" if a.get("status_code") else "")
            + (f": {a['error']}" if a.get("error") else "")
            for a in b["attempts"]
        ]
        rows.append(
            (
                tag("span", b["effect_id"], class_="mono"),
                b["direction"],
                state(b["state"]),
                f"{b['attempt']} of {b['max_attempts']}",
                b["destination"],
                b["verb"],
                join(tag("div", line) for line in attempts) if attempts else "-",
            )
        )
    return table(
        ["step", "direction", "dispatch", "attempts", "destination", "verb", "evidence"], rows
    )


def blocked_card(summary: Mapping[str, Any], csrf: str) -> Html:
    saga_id = summary["saga_id"]
    return tag(
        "div",
        join(
            [
                tag(
                    "p",
                    join(
                        [
                            saga_link(saga_id),
                            " ",
                            state(summary["state"]),
                            f" · {summary['plan_id']} / {summary['execution_id']}",
                            f" · blocked for {_age(summary['updated_at'])}",
                        ]
                    ),
                ),
                tag("p", summary["stop_reason"] or ""),
                _blocking_table(summary["blocking"]),
                forms_for(saga_id, summary["state"], summary["blocking"], csrf, False),
            ]
        ),
        class_="card blocked-saga",
        data_saga=saga_id,
    )


def blocked(summaries: Sequence[Mapping[str, Any]], csrf: str) -> Html:
    if not summaries:
        return tag("p", "Nothing is blocked.")
    return join(blocked_card(summary, csrf) for summary in summaries)


def saga_rows(rows: Sequence[Mapping[str, Any]]) -> Html:
    return table(
        ["saga", "state", "plan", "execution id", "age", "updated", "stop reason"],
        [
            (
                saga_link(r["saga_id"]),
                state(r["state"]),
                r["plan_id"],
                r["execution_id"],
                _age(r["created_at"]),
                r["updated_at"],
                r.get("stop_reason") or "",
            )
            for r in rows
        ],
    )


def search(filters: Filters, rows: Sequence[Mapping[str, Any]] | None, error: str = "") -> Html:
    results: Html = saga_rows(rows) if rows else tag("p", "No saga matches.")
    return render(
        "saga_search.html",
        states=options([s.value for s in SagaState], filters.state),
        plan_id=filters.plan_id or "",
        execution_id=filters.execution_id or "",
        destination=filters.destination or "",
        older_than=_duration(filters),
        limit=filters.limit,
        results=tag("p", error, class_="error") if error else results,
    )


def _duration(filters: Filters) -> str:
    seconds = filters.older_than.total_seconds() if filters.older_than else 0
    return f"{seconds:g}s" if seconds else ""


def _steps(view: Mapping[str, Any]) -> Html:
    rows = []
    for step in view["steps"]:
        result = step.get("result")
        rows.append(
            (
                tag("span", step["effect_id"], class_="mono"),
                step["verb"],
                state(step["state"]),
                join(
                    tag("div", join([d["direction"], " ", state(d["state"]), f" #{d['attempt']}"]))
                    for d in step["dispatches"]
                ),
                tag("details", join([tag("summary", "result"), json_block(result)]))
                if result is not None
                else "-",
            )
        )
    return table(["step", "verb", "state", "dispatches", "result"], rows)


def _timeline(view: Mapping[str, Any]) -> Html:
    return table(
        ["at", "event", "step", "move", "actor", "evidence"],
        [
            (
                e["at"],
                e["kind"],
                " ".join(filter(None, [e.get("effect_id"), e.get("direction")])),
                " → ".join(filter(None, [e.get("from_state"), e.get("to_state")])),
                e.get("actor") or "",
                e.get("evidence") or "",
            )
            for e in view["timeline"]
        ],
    )


def saga_detail(view: Mapping[str, Any], csrf: str, notice: str = "") -> Html:
    summary = blocked_summary(view)
    facts = view.get("facts")
    head = table(
        ["state", "plan", "execution id", "namespace", "age", "stop reason"],
        [
            (
                state(view["state"]),
                view["plan_id"],
                view["execution_id"],
                view["namespace"],
                _age(view["created_at"]),
                view.get("stop_reason") or "",
            )
        ],
    )
    cancelable = not view.get("cancel_requested_at")
    return join(
        [
            tag("p", notice, class_="notice") if notice else "",
            tag("p", view["saga_id"], class_="mono saga-id"),
            head,
            tag("details", join([tag("summary", "facts (the saga's input)"), json_block(facts)])),
            forms_for(view["saga_id"], view["state"], summary["blocking"], csrf, cancelable),
            tag("h2", "Steps"),
            _steps(view),
            tag("h2", "Timeline"),
            _timeline(view),
        ]
    )

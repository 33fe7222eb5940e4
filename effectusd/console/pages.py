"""The console's pages, server-rendered: overview, blocked work, saga search, one saga.

Lists show no values (see console.service); only a saga's own page shows its facts and step
results, folded away until opened.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from effectusd.console.forms import Schemas, forms_for, resolvable, resolve_form, saga_forms
from effectusd.console.html import (
    Html,
    join,
    options,
    render,
    state,
    table,
    tag,
)
from effectusd.console.service import Filters, blocked_summary
from effectusd.console.stores import NotLocated
from effectusd.core.display import (
    WHOLE,
    args_check,
    args_hash_ok,
    bounded,
    destination_reason,
    escaped,
    probe_answers,
    shown,
)
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
    stores = data.get("stores")
    if stores is not None:
        parts += [tag("h2", "By store"), _by_store(stores)]
    return with_unread(join(parts), data.get("unreached") or {})


def _by_store(stores: Mapping[str, Mapping[str, Any]]) -> Html:
    return table(
        ["store", "live sagas", "dispatches due now", "oldest waiting", "finished last hour"],
        [
            (
                label,
                sum(data["live_sagas"].values()),
                data["ready_queue_depth"],
                f"{data['oldest_ready_age_s']:.1f}s",
                sum(data["finished_last_hour"].values()),
            )
            for label, data in sorted(stores.items())
        ],
    )


def with_unread(body: Html, unread: Mapping[str, str]) -> Html:
    """``body`` after a line for each store that could not be read (by label, and why)."""
    lines = [
        tag("p", f"store {label!r} could not be read: {why}", class_="error unreached")
        for label, why in sorted(unread.items())
    ]
    return join([*lines, body])


def not_located(exc: NotLocated) -> Html:
    """Why a saga's name gave no page: each saga it fits (linked, with its store when the
    console serves several), or the stores that could not be searched."""
    first = exc.message.split("\n", 1)[0]
    stored = any("store" in c for c in exc.candidates)
    rows = [
        (
            *([c["store"]] if stored else []),
            saga_link(c["saga_id"], c["saga_id"]),
            state(c["state"]),
            c["plan_id"],
            c["execution_id"],
        )
        for c in exc.candidates
    ]
    head = [*(["store"] if stored else []), "saga", "state", "plan", "execution id"]
    listed = table(head, rows) if rows else ""
    return join([tag("p", first, class_="error"), listed])


def answer_words(status: int | None, error: str | None) -> str:
    """An answer's status and error as one phrase (``HTTP 422: no``), the status said once:
    an error recorded for an answer begins with its status already."""
    said = f"HTTP {status}" if status is not None else ""
    if error and said and error.startswith(said) and not error[len(said) :][:1].isdigit():
        return error
    return ": ".join(part for part in (said, error) if part)


def _blocking_table(blocking: Sequence[Mapping[str, Any]]) -> Html:
    rows = []
    for b in blocking:
        attempts = [
            " ".join(
                part
                for part in (
                    f"#{a['attempt']}",
                    a["outcome"] or "pending",
                    answer_words(a.get("status_code"), a.get("error")),
                )
                if part
            )
            for a in b["attempts"]
        ]
        rows.append(
            (
                tag("span", b["effect_id"], class_="mono"),
                b["direction"],
                state(b["state"]),
                f"{b['requests']} of {b['max_attempts']}",
                b["destination"],
                b["verb"],
                join(tag("div", line) for line in attempts) if attempts else "-",
            )
        )
    return table(
        ["step", "direction", "dispatch", "attempts", "destination", "verb", "evidence"], rows
    )


def read_only(why: str) -> Html:
    return tag("p", f"You may read here, not act: {why}.", class_="read-only")


def blocked_card(
    summary: Mapping[str, Any], csrf: str | None, schemas: Schemas | None = None
) -> Html:
    saga_id = summary["saga_id"]
    return tag(
        "div",
        join(
            [
                tag(
                    "p",
                    join(
                        [
                            _store_tag(summary.get("store")),
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
                forms_for(saga_id, summary, csrf, False, schemas) if csrf is not None else "",
            ]
        ),
        class_="card blocked-saga",
        data_saga=saga_id,
    )


def _store_tag(label: str | None) -> Html:
    return tag("span", label, class_="store") if label else Html("")


def blocked(
    summaries: Sequence[Mapping[str, Any]],
    csrf: str | None,
    schemas: Schemas | None = None,
    why_read_only: str = "",
) -> Html:
    """The blocked sagas, each with its forms (``csrf`` None: a viewer who may not act)."""
    if not summaries:
        return tag("p", "Nothing is blocked.")
    cards = join(blocked_card(summary, csrf, schemas) for summary in summaries)
    return join([read_only(why_read_only) if csrf is None else "", cards])


def saga_rows(rows: Sequence[Mapping[str, Any]]) -> Html:
    """The sagas of a search; across several stores, each row begins with its store."""
    stored = any("store" in r for r in rows)
    head = ["store"] if stored else []
    return table(
        [*head, "saga", "state", "plan", "execution id", "age", "updated", "stop reason"],
        [
            (
                *([r.get("store", "")] if stored else []),
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


SAGA_HEAD = ("state", "plan", "execution id", "namespace", "age", "stop reason")
ATTEMPT_HEADINGS = (
    *("attempt", "outcome", "settled by", "HTTP", "error", "fencing"),
    *("sent at", "answered at", "late answer"),
)


def _when(iso: str | None) -> str:
    return iso or "-"


def _attempts(dispatch: Mapping[str, Any]) -> Html:
    """Every attempt of a dispatch with what it left as evidence."""
    if not dispatch["attempts"]:
        return tag("p", "No attempt yet.")
    rows = []
    for a in dispatch["attempts"]:
        late = ""
        if a.get("late"):
            words = answer_words(a.get("late_status_code"), a.get("late_error"))
            late = f"{a.get('late_outcome') or '?'} at {_when(a.get('late_at'))}"
            late += f": {words}" if words else ""
        rows.append(
            (
                f"#{a['attempt']}",
                a.get("outcome") or "in progress",
                a.get("settled_by") or "-",
                a["status_code"] if a.get("status_code") is not None else "-",
                _error(a),
                a.get("fencing_status") or "-",
                "not sent" if a.get("not_sent") else _when(a.get("sent_at")),
                _when(a.get("completed_at")),
                late or "-",
            )
        )
    return table(ATTEMPT_HEADINGS, rows)


def _error(attempt: Mapping[str, Any]) -> str:
    """An attempt's error, and the destination's reason when the error does not say it."""
    error = attempt.get("error")
    reason = destination_reason(error, attempt.get("evidence"))
    said = f"destination's reason: {reason}" if reason else ""
    return " · ".join(part for part in (error, said) if part) or "-"


def _arguments(dispatch: Mapping[str, Any]) -> Html:
    """The arguments as sent (the stored bytes), checked against their hash."""
    args, digest = dispatch.get("args_canonical"), dispatch.get("args_hash")
    check = args_check(args, digest)
    label = tag("strong", f"Arguments as sent ({check}): ")
    text = tag("span", bounded(args) if args is not None else "-", class_="mono args")
    return tag("p", join([label, text]), class_=None if args_hash_ok(args, digest) else "error")


def _probes(answers: Sequence[str]) -> Html:
    if not answers:
        return Html("")
    lines = [tag("div", line, class_="mono") for line in answers]
    return tag("div", join([tag("strong", "Probe answers"), *lines]), class_="probes")


def _dispatch(dispatch: Mapping[str, Any], probes: Sequence[str] = ()) -> Html:
    facts = table(
        ["direction", "state", "attempts", "destination", "call", "idempotency key", "next at"],
        [
            (
                dispatch["direction"],
                state(dispatch["state"]),
                f"{dispatch['requests']} of {dispatch['max_attempts']}",
                dispatch["destination"],
                tag(
                    "span",
                    f"{dispatch.get('method', '')} {dispatch.get('path', '')}",
                    class_="mono",
                ),
                tag("span", dispatch.get("idempotency_key") or "-", class_="mono key"),
                _when(dispatch.get("next_attempt_at")),
            )
        ],
    )
    error = dispatch.get("last_error")
    last = tag("p", join(["Last error: ", tag("span", error, class_="mono")])) if error else ""
    waiting = dispatch.get("waiting")
    wait = tag("p", waiting, class_="waiting") if waiting else ""
    return join([facts, wait, _arguments(dispatch), last, _attempts(dispatch), _probes(probes)])


def _step(
    view: Mapping[str, Any],
    step: Mapping[str, Any],
    forms: Mapping[tuple[str, str], Mapping[str, Any]],
    csrf: str | None,
    schemas: Schemas | None,
    probes: Mapping[tuple[str, str], Sequence[str]],
) -> Html:
    """One step: where it sits in the plan, its result, each dispatch's arguments, evidence
    and probe answers, and beside a blocking dispatch the form that resolves it."""
    after = step.get("after") or []
    where = f"after {', '.join(after)}" if after else "runs first (waits for no step)"
    result = step.get("result")
    parts = [
        tag(
            "h3",
            join(
                [
                    tag("span", step["effect_id"], class_="mono"),
                    f" · {step['verb']} · ",
                    state(step["state"]),
                ]
            ),
        ),
        tag("p", where, class_="after"),
        tag("details", join([tag("summary", "result"), tag("pre", shown(result), class_="mono")]))
        if result is not None
        else "",
    ]
    for dispatch in step["dispatches"]:
        parts.append(
            _dispatch(dispatch, probes.get((step["effect_id"], dispatch["direction"]), ()))
        )
        blocking = forms.get((step["effect_id"], dispatch["direction"]))
        if blocking is not None and csrf is not None:
            parts.append(resolve_form(view["saga_id"], view["state"], blocking, csrf, schemas))
    return tag("div", join(parts), class_="card step", data_step=step["effect_id"])


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


def saga_detail(
    view: Mapping[str, Any],
    csrf: str | None,
    notice: str = "",
    schemas: Schemas | None = None,
    why_read_only: str = "",
    actions: Sequence[str] = (),
    store: str | None = None,
) -> Html:
    """One saga as `sagas show` shows it: its steps and their graph, every dispatch and
    attempt with its evidence, the Resolve form beside the dispatch it settles, the forms of
    ``actions`` (the service's ``saga_actions``), the timeline. ``csrf`` None: a viewer who
    may not act, shown no form but the reason. ``store``: the label of the store holding it,
    when the console serves several."""
    summary = blocked_summary(view)
    facts = view.get("facts") or {}
    probes = probe_answers(view["timeline"])
    head = table(
        [*(["store"] if store else []), *SAGA_HEAD],
        [
            (
                *([store] if store else []),
                state(view["state"]),
                view["plan_id"],
                view["execution_id"],
                view["namespace"],
                _age(view["created_at"]),
                view.get("stop_reason") or "",
            )
        ],
    )
    cancel = view.get("cancel_requested_by")
    targets = {
        (b["effect_id"], b["direction"]): b for b in resolvable(view["state"], summary["blocking"])
    }
    actionable = bool(targets) or bool(view.get("next_actions"))
    if csrf is None:
        forms = read_only(why_read_only) if actionable else ""
    else:
        forms = saga_forms(view["saga_id"], actions, csrf, not view.get("cancel_requested_at"))
    return join(
        [
            tag("p", notice, class_="notice") if notice else "",
            tag("p", view["saga_id"], class_="mono saga-id"),
            head,
            tag("p", f"Cancel requested by {cancel}.") if cancel else "",
            tag("details", join([tag("summary", "facts (the saga's input)"), _facts(facts)])),
            forms,
            tag("h2", "Steps"),
            join(_step(view, step, targets, csrf, schemas, probes) for step in view["steps"]),
            tag("h2", "Timeline"),
            _timeline(view),
        ]
    )


def _facts(facts: Mapping[str, Any]) -> Html:
    """Each fact on one line, long values cut (the whole: the JSON view)."""
    if not facts:
        return tag("p", "None.")
    rows = [
        (tag("span", escaped(name), class_="mono"), shown(value)) for name, value in facts.items()
    ]
    return join(
        [
            table(["fact", "value"], rows),
            tag("p", f"Long values are cut; {WHOLE} or GET /api/sagas/ID."),
        ]
    )

"""Human-readable output for the CLI (the --json forms print the same views as JSON).

Stored text (evidence, actors, errors, stop reasons) reaches a terminal only through
``printable_lines``: one line each, every control character escaped, so no value can start a
line of its own that passes for another entry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from effectusd.core.canonical import printable_lines
from effectusd.core.display import (
    WHOLE,
    args_check,
    bounded,
    destination_reason,
    escape_hidden,
    escaped,
    probe_answers,
    shown,
)
from effectusd.core.states import OutcomeClass
from effectusd.core.views import (
    AttemptView,
    DispatchView,
    SagaSummary,
    SagaView,
    StepView,
    StoredSagaSummary,
    TimelineEvent,
    blocking_dispatches,
)


def _age(at: datetime | None) -> str:
    if at is None:
        return "-"
    seconds = (datetime.now(UTC) - at).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.1f}s"


def _short(value: str | None, size: int = 12) -> str:
    return "-" if not value else (value if len(value) <= size else value[:size] + "…")


def _when(at: datetime | None, empty: str = "-") -> str:
    return empty if at is None else at.isoformat()


def _sent(attempt: AttemptView, unmarked: str = "-") -> str:
    """Whether an attempt's request left: "not sent" when it ended before its write (its
    sent_at, written ahead, says only that it may have); a known-not-committed answer was sent
    and refused."""
    if attempt.not_sent:
        return "not sent"
    sent = f"sent {_when(attempt.sent_at, unmarked)}"
    if attempt.outcome is OutcomeClass.RETRYABLE and attempt.sent_at is not None:
        return f"{sent} (refused, not committed)"
    return sent


def _evidence(step: StepView, dispatch: DispatchView) -> list[str]:
    """What to ask the destination: "did you get this key, with this argument hash?"."""
    lines = [
        f"  {step.effect_id} ({dispatch.direction}) is {dispatch.state}",
        f"    destination      {dispatch.destination}  {dispatch.method} {dispatch.path}",
        f"    verb             {dispatch.verb}  contract {dispatch.contract_hash}",
        f"    Idempotency-Key  {dispatch.idempotency_key}",
        f"    argument hash    {dispatch.args_hash}  "
        f"(stored arguments: {args_check(dispatch.args_canonical, dispatch.args_hash)})",
    ]
    for attempt in dispatch.attempts:
        grants = ", ".join(f"{g.resource}={g.token}" for g in attempt.grants or ()) or "-"
        lines.append(
            f"    attempt {attempt.attempt}  {_sent(attempt, 'never')}  "
            f"http {attempt.status_code if attempt.status_code is not None else '-'}  "
            f"{attempt.outcome or 'in progress'}  grants {grants}"
        )
        if attempt.error:
            lines.append(f"      error: {attempt.error}")
        reason = destination_reason(attempt.error, attempt.evidence)
        if reason is not None:
            lines.append(f"      destination's reason: {reason}")
        if attempt.late:
            lines.append(f"      late answer: {attempt.late_outcome} at {_when(attempt.late_at)}")
    return lines


def saga_list(rows: Sequence[SagaSummary]) -> str:
    """One line per saga; across several stores, each begins with its store's label."""
    if not rows:
        return "no sagas"
    stores = [row.store if isinstance(row, StoredSagaSummary) else None for row in rows]
    width = max((len(label) for label in stores if label is not None), default=0)
    width = width and max(width, len("STORE"))
    head = f"{'STORE':{width}} " if width else ""
    lines = [f"{head}{'SAGA':14} {'STATE':22} {'PLAN':16} {'EXECUTION':24} AGE"]
    for label, row in zip(stores, rows, strict=True):
        lines.append(
            (f"{label:{width}} " if label is not None else "")
            + f"{_short(row.saga_id):14} {row.state:22} {row.plan_id:16} "
            f"{_short(row.execution_id, 24):24} {_age(row.created_at)}"
        )
    return terminal_lines(lines)


def terminal_lines(lines: Sequence[str]) -> str:
    """Lines for a terminal: each one line whatever a stored value in it holds, control, bidi
    and separator characters escaped."""
    return escape_hidden(printable_lines(lines))


def saga_detail(view: SagaView) -> str:
    """The whole saga for a person: its facts, each step's arguments as sent (checked
    against their hash), results, attempts with the destination's reasons, probe answers,
    why it stopped and the timeline; long values cut (the whole: ``--json``)."""
    lines = _saga_header(view)
    lines += ["", f"facts (the saga's input; long values cut, {WHOLE})"]
    lines += _facts(view)
    lines += ["", "steps"]
    branches = branch_labels(view.steps)
    probes = probe_answers(event.model_dump(mode="json") for event in view.timeline)
    for step in view.steps:
        lines.extend(_step_lines(step, branches.get(step.effect_id, ""), probes))
    blocked = blocking_dispatches(view)
    if blocked:
        lines += ["", f"why it stopped: {view.stop_reason or view.state}"]
        for step, dispatch in blocked:
            lines.extend(_evidence(step, dispatch))
    if view.next_actions:
        lines += ["", "what you can do"]
        lines.extend(f"  {action}" for action in view.next_actions)
    lines += ["", "timeline"]
    lines.extend(_event_line(event) for event in view.timeline)
    return terminal_lines(lines)


def _facts(view: SagaView) -> list[str]:
    if not view.facts:
        return ["  (none)"]
    width = min(max(len(name) for name in view.facts), 24)
    return [f"  {escaped(name):{width}}  {shown(value)}" for name, value in view.facts.items()]


def _saga_header(view: SagaView) -> list[str]:
    lines = [
        f"saga       {view.saga_id}",
        f"state      {view.state}" + (f"  ({view.stop_reason})" if view.stop_reason else ""),
        f"plan       {view.plan_id}  digest {_short(view.plan_digest)}",
        f"execution  {view.execution_id}  namespace {view.namespace}",
        f"age        {_age(view.created_at)}  (updated {_age(view.updated_at)} ago)",
    ]
    if view.cancel_requested_at is not None:
        lines.append(f"cancel     requested by {view.cancel_requested_by}")
    return lines


def branch_labels(steps: Sequence[StepView]) -> dict[str, str]:
    """How a plan with parallel steps is drawn: each step with the steps it runs after
    ("after a, b"; "at once" for a step that waits for none). Nothing for a sequential plan,
    whose steps run in the order listed."""
    previous: list[str] = []
    sequential = True
    for step in steps:
        sequential = sequential and list(step.after) == previous
        previous = [step.effect_id]
    if sequential:
        return {}
    return {
        step.effect_id: f"after {', '.join(step.after)}" if step.after else "at once"
        for step in steps
    }


def _step_lines(
    step: StepView,
    branch: str = "",
    probes: Mapping[tuple[str, str], Sequence[str]] | None = None,
) -> list[str]:
    """One step, its result, each of its dispatches with the arguments it sends, and each
    dispatch's attempts and probe answers, one line apiece."""
    lines = [
        f"  {step.sequence}. {step.effect_id:20} {step.state:14} {step.verb}"
        + (f"  ({branch})" if branch else "")
    ]
    if step.result is not None:
        lines.append(f"     result  {shown(step.result)}")
    for dispatch in step.dispatches:
        lines.append(
            f"     {dispatch.direction:12} {dispatch.state:18} "
            f"attempt {dispatch.requests}/{dispatch.max_attempts}  "
            f"key {_short(dispatch.idempotency_key, 16)}  -> {dispatch.destination}"
        )
        check = args_check(dispatch.args_canonical, dispatch.args_hash)
        lines.append(f"       args ({check})  {bounded(dispatch.args_canonical)}")
        if dispatch.waiting:
            lines.append(f"       {dispatch.waiting}")
        if dispatch.last_error:
            lines.append(f"       last error: {dispatch.last_error}")
        for attempt in dispatch.attempts:
            status = attempt.status_code if attempt.status_code is not None else "-"
            late = f"  late: {attempt.late_outcome}" if attempt.late else ""
            lines.append(
                f"       #{attempt.attempt} {attempt.outcome or 'in progress':38} "
                f"http {status!s:4} fencing {attempt.fencing_status or '-':14} "
                f"{_sent(attempt)}{late}"
            )
            if attempt.error:
                lines.append(f"          error: {attempt.error}")
            reason = destination_reason(attempt.error, attempt.evidence)
            if reason is not None:
                lines.append(f"          destination's reason: {reason}")
        for answer in (probes or {}).get((step.effect_id, dispatch.direction.value), ()):
            lines.append(f"       {answer}")
    return lines


def _event_line(event: TimelineEvent) -> str:
    where = ""
    if event.effect_id:
        where = f" {event.effect_id}" + (f"/{event.direction}" if event.direction else "")
    attempt = f" #{event.attempt}" if event.attempt else ""
    change = ""
    if event.to_state:
        change = f" {event.from_state or '∅'} → {event.to_state}"
    evidence = f"  evidence: {event.evidence}" if event.evidence else ""
    return (
        f"  {event.at.isoformat()[11:23]}  {event.kind}{where}{attempt}{change}  [{event.actor}]"
        f"{evidence}"
    )

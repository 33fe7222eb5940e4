"""What the console reads and does, for the API and the pages alike: the store's own read
operations (store.operations: list_sagas, load_saga) and the operator actions of
effectusd.operator, each run as the one guarded transaction the CLI runs.

Lists never carry a saga's values: list rows have none, and a blocked saga is summarised
from its view through the allow-lists below (facts, results, arguments rendered into paths
and fencing resources, and the raw answers kept as attempt evidence stay out). Only
``saga()`` and ``saga_page()``, one saga's detail, return the whole view.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from effectusd.backends.errors import READ_ONLY
from effectusd.backends.operation import Operation
from effectusd.config import Config
from effectusd.console.stores import (
    NotLocated,
    ServedStore,
    Stores,
    Unread,
    labelled,
    unread,
)
from effectusd.core import operator_decisions as decide
from effectusd.core.adoption import drifted_verbs
from effectusd.core.canonical import JsonValue
from effectusd.core.durations import parse_duration
from effectusd.core.plan import CheckedPlan
from effectusd.core.registry import Registry
from effectusd.core.states import Direction, SagaState
from effectusd.core.views import SagaView, blocking_dispatches, jsonable
from effectusd.operator import adopt_contract, cancel, resolve, retry
from effectusd.operator.fences import release_ended_leases
from effectusd.operator.report import ActionReport
from effectusd.store import operations
from effectusd.store.across import Done
from effectusd.store.dispatch import outbox_sample

MAX_LIST = 1_000
READ_ONLY_TEXT = (
    "takes no writes (a standby, or default_transaction_read_only on): nothing was written; "
    "act again once it takes writes"
)
FINISHED_WINDOW = timedelta(hours=1)
ACTIONS = ("resolve", "retry", "cancel", "adopt-contract")
# The console's name of each action on a whole saga (its path, its form).
SAGA_ACTIONS = {
    decide.Action.RETRY: "retry",
    decide.Action.CANCEL: "cancel",
    decide.Action.ADOPT_CONTRACT: "adopt-contract",
}

SUMMARY_SAGA = (
    "saga_id",
    "namespace",
    "execution_id",
    "plan_id",
    "plan_digest",
    "state",
    "stop_reason",
    "cancel_requested_at",
    "cancel_requested_by",
    "created_at",
    "updated_at",
    "next_actions",
)
SUMMARY_DISPATCH = (
    "direction",
    "state",
    "attempt",
    "requests",
    "max_attempts",
    "destination",
    "verb",
    "delivery",
    "uncertain_attempt",
    "last_outcome",
    "last_error",
    "next_attempt_at",
    "updated_at",
    "waiting",
)
SUMMARY_ATTEMPT = (
    "attempt",
    "outcome",
    "settled_by",
    "status_code",
    "error",
    "sent_at",
    "not_sent",
    "completed_at",
    "late",
    "late_outcome",
    "late_error",
)


class BadInput(ValueError):
    """A filter or a field the console cannot use; the message names it."""


# The CLI's words in the refusals the operator actions share with it, and the console's.
CLI_WORDS = (
    ("`effectusd resolve`", "Resolve"),
    ("`effectusd retry`", "Retry"),
    ("`effectusd cancel`", "Cancel"),
    ("--not-committed --retry", "decision not_committed_retry"),
    ("--direction compensation", "the compensation's Resolve form"),
    ("--committed", "decision committed"),
    ("--result", "result"),
    ("--evidence", "evidence"),
)
# Text no store keeps: NUL (PostgreSQL refuses it) and halves of a surrogate pair.
UNSTORABLE = re.compile(r"[\x00\ud800-\udfff]")


def console_words(message: str) -> str:
    """A refusal worded for the console: its fields and buttons, not the CLI's flags."""
    for cli, console in CLI_WORDS:
        message = message.replace(cli, console)
    return message


def storable(name: str, value: str) -> str:
    """``value``, or BadInput naming ``name`` if it holds text no store can keep."""
    if UNSTORABLE.search(value):
        raise BadInput(f"{name}: contains a NUL character or an unpaired surrogate")
    return value


def _strings(value: Any, path: str) -> None:
    """BadInput naming where ``value`` (parsed JSON, depth already bounded) holds unstorable
    text."""
    if isinstance(value, str):
        storable(path, value)
    elif isinstance(value, dict):
        for key, item in value.items():
            storable(path, key)
            _strings(item, f"{path}/{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _strings(item, f"{path}/{index}")


def as_dict(view: Any) -> dict[str, Any]:
    """The dict form of a saga view (a typed view gives its JSON form)."""
    dump = getattr(view, "model_dump", None)
    return dict(dump(mode="json")) if callable(dump) else dict(jsonable(view))


def _pick(row: Mapping[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    return {name: row.get(name) for name in fields}


def blocked_summary(view: SagaView | Mapping[str, Any]) -> dict[str, Any]:
    """A blocked saga without its values: what blocks it, and the attempts' evidence."""
    typed = view if isinstance(view, SagaView) else SagaView.model_validate(view)
    summary = _pick(typed.model_dump(mode="json"), SUMMARY_SAGA)
    summary["blocking"] = [
        _blocking(step.effect_id, dispatch.model_dump(mode="json"))
        for step, dispatch in blocking_dispatches(typed)
    ]
    return summary


def _blocking(effect_id: str, dispatch: dict[str, Any]) -> dict[str, Any]:
    return {
        "effect_id": effect_id,
        **_pick(dispatch, SUMMARY_DISPATCH),
        "attempts": [_pick(a, SUMMARY_ATTEMPT) for a in dispatch["attempts"]],
    }


@dataclass(frozen=True)
class Filters:
    state: str | None = None
    plan_id: str | None = None
    execution_id: str | None = None
    destination: str | None = None
    older_than: timedelta | None = None
    limit: int = 100

    @classmethod
    def parse(cls, query: Mapping[str, str]) -> Filters:
        """From a query string; BadInput naming the parameter."""
        values = {k: storable(k, v.strip()) for k, v in query.items() if v.strip()}
        state = values.get("state")
        if state is not None and state not in {s.value for s in SagaState}:
            raise BadInput(f"state: {state!r} is not a saga state")
        try:
            older = values.get("older_than")
            older_than = parse_duration(older) if older else None
        except ValueError as exc:
            raise BadInput(f"older_than: {exc}") from None
        limit = values.get("limit", "100")
        if not re.fullmatch(r"[0-9]{1,9}", limit) or not 1 <= int(limit) <= MAX_LIST:
            raise BadInput(f"limit: a whole number from 1 to {MAX_LIST}")
        return cls(
            state,
            values.get("plan_id"),
            values.get("execution_id"),
            values.get("destination"),
            older_than,
            int(limit),
        )


def saga_actions(view: SagaView, registry: Registry) -> Operation[list[str]]:
    """The actions on the whole saga the operator layer accepts now, the one that fits
    first (operator_decisions.offered_actions); for blocked_contract that depends on the
    loaded contracts against the saga's pinned plan."""
    contract: tuple[decide.Action, ...] = ()
    if view.state is SagaState.BLOCKED_CONTRACT:
        plan = yield from operations.saga_plan(view.saga_id)
        if plan is not None:
            contract = _contract_actions(view, plan, registry)
    blocking = [dispatch.direction for _, dispatch in blocking_dispatches(view)]
    offered = decide.offered_actions(view.state, contract, blocking)
    return [SAGA_ACTIONS[action] for action in offered]


def _contract_actions(
    view: SagaView, plan: CheckedPlan, registry: Registry
) -> tuple[decide.Action, ...]:
    blocked = [dispatch.verb for _, dispatch in blocking_dispatches(view)]
    verbs = {step.verb for step in plan.steps}
    verbs |= {step.compensate.verb for step in plan.steps if step.compensate is not None}
    return decide.contract_actions(
        blocked[0] if blocked else None,
        drifted_verbs(plan, registry.verbs),
        sorted(verb for verb in verbs if verb not in registry.verbs),
    )


def _saga_page(saga_id: str, registry: Registry) -> Operation[tuple[SagaView, list[str]] | None]:
    view = yield from operations.load_saga(saga_id)
    if view is None:
        return None
    return view, (yield from saga_actions(view, registry))


def _blocked_queue(
    namespace: str, limit: int, registry: Registry
) -> Operation[list[dict[str, Any]]]:
    """Blocked sagas, longest blocked first, each summarised with the actions on the whole
    saga it admits now, in one read transaction."""
    rows = []
    for state in operations.BLOCKED_STATES:
        rows += yield from operations.list_sagas(state=state, namespace=namespace, limit=limit)
    rows.sort(key=lambda row: (row["updated_at"], row["saga_id"]))
    summaries = []
    for row in rows[:limit]:
        view = yield from operations.load_saga(row["saga_id"])
        if view is not None:  # pruned meanwhile
            summary = blocked_summary(view)
            summary["actions"] = yield from saga_actions(view, registry)
            summaries.append(summary)
    return summaries


def _overview_reads() -> Operation[dict[str, Any]]:
    sample = yield from outbox_sample()
    finished = yield from operations.count_finished_sagas(FINISHED_WINDOW)
    return {
        "live_sagas": sample.sagas,
        "ready_queue_depth": sample.ready_depth,
        "oldest_ready_age_s": round(sample.oldest_ready_s, 3),
        "finished_last_hour": finished,
    }


def merged_overview(done: Done[ServedStore, dict[str, Any]], missed: Unread) -> dict[str, Any]:
    """Several stores' overviews as one: the counts summed, the oldest wait the longest, and
    each store's own under its label."""
    live: Counter[str] = Counter()
    finished: Counter[str] = Counter()
    for _, data in done:
        live.update(data["live_sagas"])
        finished.update(data["finished_last_hour"])
    return {
        "live_sagas": dict(live),
        "ready_queue_depth": sum(data["ready_queue_depth"] for _, data in done),
        "oldest_ready_age_s": max((data["oldest_ready_age_s"] for _, data in done), default=0),
        "finished_last_hour": dict(finished),
        "stores": {str(store.label): data for store, data in done},
        "unreached": missed,
    }


class ConsoleService:
    """The store reads and operator actions of one console, over the stores it serves."""

    def __init__(self, config: Config, stores: Sequence[ServedStore]) -> None:
        self.config = config
        self.stores = Stores(stores)
        self.registry = config.registry()

    async def sagas(self, filters: Filters) -> tuple[list[dict[str, Any]], Unread]:
        """The sagas ``filters`` select, newest first across the stores (each with its
        label), and the stores that could not be read."""
        done, missed = await self.stores.run_each(
            lambda store: operations.list_sagas(
                filters.state,
                filters.plan_id,
                store.config.namespace,
                filters.limit,
                filters.older_than,
                execution_id=filters.execution_id,
                destination=filters.destination,
            )
        )
        rows = [(store, row) for store, found in done for row in found]
        if self.stores.several:
            rows.sort(key=lambda pair: (pair[1]["created_at"], pair[1]["saga_id"]), reverse=True)
        listed = [labelled(store, jsonable(dict(row))) for store, row in rows[: filters.limit]]
        return listed, unread(missed)

    async def saga(self, name: str) -> dict[str, Any] | None:
        """One saga's view, found by its id or a unique start of it (NotLocated if none)."""
        store, saga_id = await self.stores.locate(name)
        view = await store.backend.runner.run_async(operations.load_saga(saga_id))
        return None if view is None else as_dict(view)

    async def saga_page(self, name: str) -> tuple[str | None, dict[str, Any], list[str]] | None:
        """One saga's store label, its view and the actions on the whole saga it admits now."""
        store, saga_id = await self.stores.locate(name)
        found = await store.backend.runner.run_async(_saga_page(saga_id, self.registry))
        return None if found is None else (store.label, as_dict(found[0]), found[1])

    async def blocked(self, limit: int = 100) -> tuple[list[dict[str, Any]], Unread]:
        """Blocked sagas, longest blocked first across the stores (each with its label)."""
        done, missed = await self.stores.run_each(
            lambda store: _blocked_queue(store.config.namespace, limit, self.registry)
        )
        summaries = [labelled(store, summary) for store, found in done for summary in found]
        if self.stores.several:
            summaries.sort(key=lambda s: (datetime.fromisoformat(s["updated_at"]), s["saga_id"]))
        return summaries[:limit], unread(missed)

    async def overview(self) -> dict[str, Any]:
        done, missed = await self.stores.run_each(lambda _: _overview_reads())
        return merged_overview(done, unread(missed)) if self.stores.several else done[0][1]

    async def act(
        self, action: str, name: str, fields: Mapping[str, Any], actor: str
    ) -> tuple[str | None, ActionReport]:
        """Run one operator action on the saga ``name`` names, in the store that holds it:
        that store's label and the report; ``Refused`` (writing nothing) when it does not
        apply, NotLocated when no one saga is named or its store takes no writes."""
        store, saga_id = await self.stores.locate(name)
        operation = self._operation(action, saga_id, fields, actor)
        try:
            report = await store.backend.runner.run_async(operation)
        except READ_ONLY:  # read, then refused the write: a standby, or read-only by setting
            raise NotLocated("unreached", f"{store.name} {READ_ONLY_TEXT}") from None
        if self.config.fencing.url is not None:  # a failure is logged; the action stands
            await asyncio.to_thread(
                release_ended_leases, self.config.fencing.url, store.backend, store.label, saga_id
            )
        return store.label, report

    @staticmethod
    def operator_name(fields: Mapping[str, Any]) -> str | None:
        """Who the operator says they are (the form's or the JSON's ``actor``)."""
        return _text(fields, "actor")

    def _operation(
        self, action: str, saga_id: str, fields: Mapping[str, Any], actor: str
    ) -> Operation[ActionReport]:
        evidence = _text(fields, "evidence")
        if action == "resolve":
            return self._resolve(saga_id, fields, actor, _required_evidence(evidence))
        if action == "adopt-contract":
            return adopt_contract(
                saga_id,
                registry=self.registry,
                actor=actor,
                evidence=_required_evidence(evidence),
            )
        if action in ("retry", "cancel"):
            run = retry if action == "retry" else cancel
            return run(
                saga_id,
                registry=self.registry,
                actor=actor,
                evidence=decide.optional_evidence(evidence),
            )
        raise BadInput(f"no action {action!r}; one of {', '.join(ACTIONS)}")

    def _resolve(
        self, saga_id: str, fields: Mapping[str, Any], actor: str, evidence: str
    ) -> Operation[ActionReport]:
        """The CLI's resolve: the decision as one word instead of two flags."""
        decision = _text(fields, "decision") or ""
        if decision not in {r.value for r in decide.Resolution}:
            raise BadInput("decision: one of " + ", ".join(r.value for r in decide.Resolution))
        effect_id = _text(fields, "effect_id")
        if not effect_id:
            raise BadInput("effect_id: which step to resolve")
        direction = _text(fields, "direction") or None
        if direction not in (None, *(d.value for d in Direction)):
            raise BadInput("direction: forward or compensation")
        where = Direction(direction) if direction else None
        resolution = decide.Resolution(decision)
        return resolve(
            saga_id,
            effect_id,
            resolution,
            registry=self.registry,
            actor=actor,
            evidence=evidence,
            result=_result(fields, resolution, where),
            direction=where,
        )


def _text(fields: Mapping[str, Any], name: str) -> str | None:
    value = fields.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadInput(f"{name}: a string")
    return storable(name, value)


def _required_evidence(evidence: str | None) -> str:
    if not (evidence or "").strip():
        raise BadInput(
            "evidence: say what you checked at the destination (it goes on the timeline)"
        )
    return decide.required_evidence(evidence)


def _result_text(fields: Mapping[str, Any]) -> str | None:
    """The step's result as JSON text: a form sends the text (``result_json``), the API a
    JSON value (``result``); neither, or empty text, is no result."""
    text = _text(fields, "result_json")
    if text is not None and text.strip():
        return text
    return json.dumps(fields["result"]) if fields.get("result") is not None else None


def _result(
    fields: Mapping[str, Any], resolution: decide.Resolution, where: Direction | None
) -> JsonValue:
    """The step's result, checked as the CLI checks --result (only with committed)."""
    text = _result_text(fields)
    if resolution is not decide.Resolution.COMMITTED and text is not None:
        raise BadInput("result: goes with decision committed")
    try:
        value = decide.committed_result(text, where)
    except decide.Refused as exc:
        raise BadInput(console_words(exc.message)) from None
    _strings(value, "result")
    return value

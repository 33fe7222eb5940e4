"""settle() as a decision table: every cause an attempt can end with, crossed with its outcome,
delivery, direction, an earlier uncertain attempt, the attempt budget and the time budget, and
(for an executor's answer) the ``answers`` preset that classified it. The expected rows in
``settle_table.json`` were generated from the engine and are replayed here unchanged: a row
that differs is a change of behaviour, never a refactoring.

Regenerate (only for a deliberate change of behaviour, reviewed row by row):
``python -m tests.unit.test_settle_table --regenerate``.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from effectusd.core.answers import PresetClass
from effectusd.core.checker import check
from effectusd.core.engine import Completion, DispatchFacts, FenceWait, SagaFacts, StepFacts, settle
from effectusd.core.pre_send import (
    BUDGET_SPENT,
    CONTRACT_DRIFT,
    LEASE_TOO_SHORT,
)
from effectusd.core.registry import Registry
from effectusd.core.states import (
    Cause,
    Delivery,
    Direction,
    DispatchState,
    FencingStatus,
    OutcomeClass,
    SagaState,
    StepState,
)
from tests.unit.conftest import make_core_verbs

TABLE = Path(__file__).with_name("settle_table.json")
SAGA_ID = "b" * 64
VERB_OF = {Delivery.AT_LEAST_ONCE: "ship", Delivery.AT_MOST_ONCE: "notify"}
HOLDER = "dispatch 7 of saga " + "c" * 64 + ", lease owner host:1"
JITTER = 0.5


def registry() -> Registry:
    return Registry(make_core_verbs(), destination_timeouts={"warehouse": timedelta(seconds=30)})


@dataclass(frozen=True)
class Held:
    dispatch_id: int
    attempt: int
    lease_token: str | None


# -- each kind of completion, by name -----------------------------------------------------------


Build = Callable[[Registry, Held, DispatchFacts], Completion]


def _answered(outcome: OutcomeClass, preset: PresetClass | None) -> Build:
    def build(_reg: Registry, held: Held, _dispatch: DispatchFacts) -> Completion:
        return Completion.answered(
            held,
            outcome,
            status_code=401 if preset is not None else 502,
            result={"id": "r-1"} if outcome is OutcomeClass.SUCCESS else None,
            error=None if outcome is OutcomeClass.SUCCESS else "declined",
            evidence={},
            fencing_acknowledged=False,
            fencing_sent=FencingStatus.NOT_REQUESTED,
            preset=preset,
        )

    return build


def _guard(cause: Cause, reason: str) -> Build:
    return lambda _reg, held, _dispatch: Completion.not_sent(held, cause, reason, actor="worker-1")


def _fence_wait(waited: timedelta | None) -> Build:
    def build(reg: Registry, held: Held, _dispatch: DispatchFacts) -> Completion:
        wait = FenceWait(waited or reg.fence_wait_limit, HOLDER, "account:1", started=True)
        return Completion.not_sent(held, wait, "busy")

    return build


def _reclaimed(sent: bool) -> Build:
    return lambda _reg, held, _dispatch: Completion.reclaimed(held, sent, "worker-2", "worker-5")


def _resolved(committed: bool) -> Build:
    """What ``effectusd resolve`` records (operator/actions.py)."""
    return lambda _reg, _held, dispatch: Completion.resolved(
        dispatch, committed, {"id": "r-1"}, "ana", "checked"
    )


def _probed(committed: bool) -> Build:
    """What a probe's answer records (operator/probes.py)."""
    return lambda _reg, _held, dispatch: Completion.probed(
        dispatch, committed, {"id": "r-1"}, "probe", "gone"
    )


def kinds() -> dict[str, Build]:
    """Every kind of completion settle() is given, by a stable name (the table's key)."""
    table: dict[str, Build] = {}
    for outcome in OutcomeClass:
        for preset in (None, *PresetClass):
            name = f"answered:{outcome.value}:{preset.value if preset else 'declared'}"
            table[name] = _answered(outcome, preset)
    for cause, reason in (
        (Cause.CONTRACT_DRIFT, CONTRACT_DRIFT),
        (Cause.BUDGET_SPENT, BUDGET_SPENT),
        (Cause.LEASE_TOO_SHORT, LEASE_TOO_SHORT),
        (Cause.WRITE_AHEAD_FAILED, "write-ahead failed: boom; not sent"),
    ):
        table[f"guard:{cause.value}"] = _guard(cause, reason)
    table["fence_wait:within_limit"] = _fence_wait(timedelta(seconds=1))
    table["fence_wait:past_limit"] = _fence_wait(None)
    for sent in (False, True):
        table[f"reclaimed:{'sent' if sent else 'unsent'}"] = _reclaimed(sent)
    for committed in (True, False):
        found = "committed" if committed else "not_committed"
        table[f"resolved:{found}"] = _resolved(committed)
        table[f"probed:{found}"] = _probed(committed)
    return table


# -- the facts ----------------------------------------------------------------------------------


def _plan(verb: str) -> dict[str, Any]:
    return {
        "plan_id": "p",
        "steps": [
            {"id": "first", "verb": "ship", "args": {"n": 1}, "compensate": {"verb": verb}},
            {"id": "second", "verb": verb, "args": {"n": 3}, "compensate": "none"},
        ],
    }


def _saga(reg: Registry, verb: str, direction: Direction, blocked: bool) -> SagaFacts:
    checked = check(_plan(verb), reg.verbs)
    if direction is Direction.FORWARD:
        state = SagaState.RUNNING
        steps = {"first": StepState.SUCCEEDED, "second": StepState.IN_PROGRESS}
    else:
        state = SagaState.COMPENSATING
        steps = {"first": StepState.COMPENSATING, "second": StepState.FAILED}
    return SagaFacts(
        saga_id=SAGA_ID,
        namespace="default",
        execution_id="x",
        state=SagaState.BLOCKED_UNKNOWN if blocked else state,
        cancel_requested=False,
        plan=checked,
        facts={},
        steps={s.id: StepFacts(s.id, s.sequence, steps[s.id]) for s in checked.steps},
        compensation_reason=None if direction is Direction.FORWARD else "step 'second' failed",
    )


@dataclass(frozen=True)
class Case:
    kind: str
    delivery: Delivery
    direction: Direction
    uncertain: bool
    attempts_spent: bool
    time_spent: bool

    @property
    def key(self) -> str:
        return "|".join(
            (
                self.kind,
                self.delivery.value,
                self.direction.value,
                "uncertain" if self.uncertain else "certain",
                "attempts_spent" if self.attempts_spent else "attempts_left",
                "time_spent" if self.time_spent else "time_left",
            )
        )


def cases() -> Iterator[Case]:
    for values in itertools.product(
        kinds(), Delivery, Direction, (False, True), (False, True), (False, True)
    ):
        yield Case(*values)


def decide(case: Case, reg: Registry) -> dict[str, Any]:
    """Today's settle() on ``case``'s facts, as the table records it."""
    verb = VERB_OF[case.delivery]
    contract = reg.verbs[verb]
    attempt = contract.retry.max_attempts if case.attempts_spent else 2
    operator = case.kind.startswith(("resolved:", "probed:"))
    dispatch = DispatchFacts(
        dispatch_id=1,
        effect_id="second" if case.direction is Direction.FORWARD else "first",
        direction=case.direction,
        delivery=case.delivery,
        verb=verb,
        state=DispatchState.BLOCKED_UNKNOWN if operator else DispatchState.IN_FLIGHT,
        attempt=attempt,
        max_attempts=contract.retry.max_attempts,
        uncertain_attempt=1 if case.uncertain else None,
        fence_waits=1,
        budget_elapsed=contract.retry.give_up_after if case.time_spent else timedelta(0),
    )
    held = Held(1, attempt, None if operator else "t")
    completion = kinds()[case.kind](reg, held, dispatch)
    saga = _saga(reg, verb, case.direction, blocked=operator)
    transition = settle(completion, dispatch, saga, reg, JITTER)
    update = transition.saga
    return {
        "dispatch": transition.dispatch_state.value,
        "kind": _kind(transition.dispatch_state),
        "saga": None if update is None else update.state.value,
        "reason": None if update is None else update.stop_reason,
        "last_error": transition.last_error,
        "uncertain_attempt": transition.uncertain_attempt,
        "retry_delay_s": _seconds(transition.retry_delay),
        "gives_up_in_s": _seconds(transition.gives_up_in),
        "enqueued": [f"{s.effect_id}:{s.direction}" for s in transition.new_dispatches],
    }


def _kind(state: DispatchState) -> str:
    if state is DispatchState.RETRY_WAIT:
        return "retry"
    if state.value.startswith("blocked_"):
        return "block"
    return {
        DispatchState.FAILED_PERMANENT: "fail",
        DispatchState.SUCCEEDED: "succeed",
        DispatchState.CANCELED: "cancel",
    }.get(state, state.value)


def _seconds(delta: timedelta | None) -> float | None:
    return None if delta is None else delta.total_seconds()


def generate() -> dict[str, dict[str, Any]]:
    reg = registry()
    return {case.key: decide(case, reg) for case in cases()}


EXPECTED: dict[str, dict[str, Any]] = json.loads(TABLE.read_text()) if TABLE.exists() else {}


def test_the_table_covers_every_case_and_only_those() -> None:
    assert sorted(EXPECTED) == sorted(case.key for case in cases())


@pytest.mark.parametrize("case", list(cases()), ids=lambda case: case.key)
def test_settle_decides_as_the_table_says(case: Case) -> None:
    assert decide(case, registry()) == EXPECTED[case.key]


if __name__ == "__main__":
    if sys.argv[1:] != ["--regenerate"]:
        sys.exit("usage: python -m tests.unit.test_settle_table --regenerate")
    TABLE.write_text(json.dumps(generate(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {TABLE}")

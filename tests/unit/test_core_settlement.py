"""settle_completion(): the guard and the late-answer rules, one row per case. Pure: the
locked facts in, drop / late / apply out."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from effectusd.core.checker import check
from effectusd.core.engine import settle
from effectusd.core.poison import held_completion
from effectusd.core.registry import Registry
from effectusd.core.settlement import (
    AttemptFacts,
    LockedDispatch,
    Settlement,
    SettlementFacts,
    Verdict,
    settle_completion,
)
from effectusd.core.states import (
    Cause,
    Delivery,
    Direction,
    DispatchState,
    FencingStatus,
    OutcomeClass,
    SagaState,
    SettledBy,
    StepState,
)
from effectusd.core.transition import (
    Completion,
    DispatchFacts,
    HeldClaim,
    Quarantined,
    SagaFacts,
    StepFacts,
)

TOKEN = "lease-1"
BEGAN = "step 'second' failed: permanent failure: declined"
PLAN = {
    "plan_id": "p",
    "steps": [
        {"id": "first", "verb": "ship", "args": {"n": 1}, "compensate": {"verb": "ship"}},
        {"id": "second", "verb": "ship", "args": {"n": 2}, "compensate": "none"},
    ],
}


@dataclass(frozen=True)
class Case:
    name: str
    # the completion
    cause: Cause = Cause.ANSWERED  # a reclaim's outcome is its own (sent: unknown)
    outcome: OutcomeClass = OutcomeClass.SUCCESS
    attempt: int = 2
    token: str | None = TOKEN
    # the locked dispatch row
    state: DispatchState = DispatchState.IN_FLIGHT
    row_attempt: int = 2
    row_token: str | None = TOKEN
    lease_expired: bool = False
    uncertain: int | None = None
    direction: Direction = Direction.FORWARD
    # the attempt row
    attempt_settled_by: SettledBy | None = None
    later_sent: bool = False
    attempt_token: str | None = TOKEN  # the lease the attempt row was opened under
    # the saga
    saga_state: SagaState = SagaState.RUNNING
    # expected
    verdict: Verdict = Verdict.APPLY
    late: bool = False
    dispatch_to: DispatchState | None = None
    saga_to: tuple[SagaState, str | None] | None = None


def blocked(name: str, **changes: Any) -> Case:
    """A late answer for a dispatch blocked_unknown on ``attempt`` 2, its lease long gone
    (a reclaim settled the attempt as unknown)."""
    base: dict[str, Any] = {
        "state": DispatchState.BLOCKED_UNKNOWN,
        "row_token": None,
        "uncertain": 2,
        "attempt_settled_by": SettledBy.RECLAIM,
        "saga_state": SagaState.BLOCKED_UNKNOWN,
        "late": True,
    }
    return Case(name, **{**base, **changes})


CASES = [
    Case(
        "guard holds: the live attempt's answer",
        dispatch_to=DispatchState.SUCCEEDED,
        saga_to=(SagaState.COMPLETED, None),
    ),
    Case(
        "reclaim of an expired lease",
        cause=Cause.RECLAIMED_UNSENT,
        lease_expired=True,
        outcome=OutcomeClass.RETRYABLE,
        dispatch_to=DispatchState.RETRY_WAIT,
    ),
    Case(
        "reclaim of a lease still running",
        cause=Cause.RECLAIMED_SENT,
        outcome=OutcomeClass.UNKNOWN,
        verdict=Verdict.DROP,
    ),
    Case(
        "reclaim after the holder finished",
        cause=Cause.RECLAIMED_SENT,
        lease_expired=True,
        state=DispatchState.SUCCEEDED,
        row_token=None,
        outcome=OutcomeClass.UNKNOWN,
        attempt_settled_by=SettledBy.EXECUTOR,
        verdict=Verdict.DROP,
    ),
    Case(
        "our own earlier commit went through",
        state=DispatchState.SUCCEEDED,
        row_token=None,
        attempt_settled_by=SettledBy.EXECUTOR,
        verdict=Verdict.DROP,
    ),
    Case(
        "another lease token on the same attempt",
        row_token="lease-2",
        verdict=Verdict.LATE,
        late=True,
    ),
    Case(
        "an answer for an attempt already superseded",
        row_attempt=3,
        verdict=Verdict.LATE,
        late=True,
    ),
    Case(
        "a guard's answer that missed the guard",
        cause=Cause.WRITE_AHEAD_FAILED,
        outcome=OutcomeClass.RETRYABLE,
        row_token="lease-2",
        verdict=Verdict.LATE,
        late=True,
    ),
    Case(
        "late answer after a reclaim, on a dispatch that moved on",
        row_token=None,
        state=DispatchState.RETRY_WAIT,
        attempt_settled_by=SettledBy.RECLAIM,
        verdict=Verdict.LATE,
        late=True,
    ),
    blocked(
        "late answer settles the uncertain attempt",
        dispatch_to=DispatchState.SUCCEEDED,
        saga_to=(SagaState.COMPLETED, None),
    ),
    blocked(
        "late unknown answer settles nothing",
        outcome=OutcomeClass.UNKNOWN,
        verdict=Verdict.LATE,
        late=True,
    ),
    blocked(
        "late answer after a later attempt was sent",
        later_sent=True,
        verdict=Verdict.LATE,
        late=True,
    ),
    blocked(
        "late answer for another attempt than the uncertain one",
        uncertain=1,
        verdict=Verdict.LATE,
        late=True,
    ),
    blocked(
        "late answer of a compensation resumes with the reason compensation began",
        direction=Direction.COMPENSATION,
        dispatch_to=DispatchState.SUCCEEDED,
        saga_to=(SagaState.COMPENSATED, BEGAN),
    ),
    blocked(
        "late failure of a compensation blocks it again with its own reason",
        direction=Direction.COMPENSATION,
        late=True,
        outcome=OutcomeClass.PERMANENT,
        dispatch_to=DispatchState.FAILED_PERMANENT,
        saga_to=(
            SagaState.BLOCKED_COMPENSATION,
            "compensation of 'first' failed: permanent failure: declined",
        ),
    ),
    # A failover that lost a claim numbers the next attempt the same: the lost attempt's
    # answer is kept as evidence (on the row of its number), and never settles the
    # uncertainty of the attempt now under that number.
    Case(
        "an answer whose attempt row another lease opened is late",
        token="lost-lease",
        row_token="new-lease",
        attempt_token="new-lease",
        verdict=Verdict.LATE,
        late=True,
    ),
    blocked(
        "a lost attempt's answer does not settle the block of the attempt now under its number",
        token="lost-lease",
        attempt_token="new-lease",
        verdict=Verdict.LATE,
    ),
    Case(
        "the holder's own answer on its own row applies",
        dispatch_to=DispatchState.SUCCEEDED,
        saga_to=(SagaState.COMPLETED, None),
    ),
]


def saga_of(registry: Registry, case: Case) -> SagaFacts:
    checked = check(PLAN, registry.verbs)
    undoing = case.direction is Direction.COMPENSATION
    states = {
        "first": StepState.COMPENSATING if undoing else StepState.SUCCEEDED,
        "second": StepState.FAILED if undoing else StepState.IN_PROGRESS,
    }
    return SagaFacts(
        saga_id="s" * 64,
        namespace="default",
        execution_id="x",
        state=case.saga_state,
        cancel_requested=False,
        plan=checked,
        facts={},
        steps={s.id: StepFacts(s.id, s.sequence, states[s.id]) for s in checked.steps},
        compensation_reason=BEGAN if case.saga_state.is_blocked else None,
    )


def facts_of(case: Case, saga: Callable[[], SagaFacts]) -> SettlementFacts:
    undoing = case.direction is Direction.COMPENSATION
    dispatch = DispatchFacts(
        dispatch_id=1,
        effect_id="first" if undoing else "second",
        direction=case.direction,
        delivery=Delivery.AT_LEAST_ONCE,
        verb="ship",
        state=case.state,
        attempt=case.row_attempt,
        max_attempts=5,
        uncertain_attempt=case.uncertain,
    )
    return SettlementFacts(
        LockedDispatch(dispatch, case.row_token, case.lease_expired),
        AttemptFacts(case.attempt_settled_by, case.later_sent, lease_token=case.attempt_token),
        saga,
    )


def run(registry: Registry, case: Case) -> Settlement:
    completion = completion_of(case)
    built: list[SagaFacts] = []

    def saga() -> SagaFacts:
        built.append(saga_of(registry, case))
        return built[-1]

    settlement = settle_completion(completion, facts_of(case, saga), registry, 0.5)
    # a dropped or merely late answer never needs the saga (its plan is never even read)
    assert bool(built) is (settlement.verdict is Verdict.APPLY)
    return settlement


def completion_of(case: Case) -> Completion:
    held = HeldClaim(1, case.attempt, case.token)
    match case.cause:
        case Cause.ANSWERED:
            return Completion.answered(held, case.outcome, error="declined")
        case Cause.RECLAIMED_SENT | Cause.RECLAIMED_UNSENT:
            sent = case.cause is Cause.RECLAIMED_SENT
            return Completion.reclaimed(held, sent, "worker-2", "worker-5")
        case guard:
            return Completion.not_sent(held, guard, "declined")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_settlement_table(core_registry: Registry, case: Case) -> None:
    settlement = run(core_registry, case)
    assert (settlement.verdict, settlement.late) == (case.verdict, case.late)
    if case.verdict is not Verdict.APPLY:
        assert settlement.transition is None
        return
    assert settlement.transition is not None
    assert settlement.transition.dispatch_state is case.dispatch_to
    saga = settlement.transition.saga
    assert (None if saga is None else (saga.state, saga.stop_reason)) == case.saga_to


@dataclass(frozen=True)
class Held:
    """A claim as core sees it: only the attempt and the lease it is held under."""

    dispatch_id: int = 7
    attempt: int = 2
    lease_token: str = TOKEN


def test_a_not_sent_completion_is_a_guard_retry_of_the_held_attempt() -> None:
    completion = Completion.not_sent(
        Held(), Cause.WRITE_AHEAD_FAILED, "nothing was sent", actor="worker-1"
    )
    assert (completion.dispatch_id, completion.attempt, completion.lease_token) == (7, 2, TOKEN)
    assert (completion.outcome, completion.cause.settled_by) == (
        OutcomeClass.RETRYABLE,
        SettledBy.GUARD,
    )
    assert (completion.error, completion.actor) == ("nothing was sent", "worker-1")
    assert completion.cause is Cause.WRITE_AHEAD_FAILED
    # Unrecordable, it is still held as not sent: only a guard settlement says so.
    held = held_completion(completion, "boom")
    assert held.outcome is OutcomeClass.RETRYABLE
    sent = held_completion(Completion.answered(Held(), OutcomeClass.RETRYABLE), "boom")
    assert sent.outcome is OutcomeClass.UNKNOWN


@pytest.mark.parametrize(
    ("cause", "settled_by"),
    [
        (Cause.ANSWERED, SettledBy.EXECUTOR),
        (Cause.RECLAIMED_SENT, SettledBy.RECLAIM),
        (Cause.LEASE_TOO_SHORT, SettledBy.GUARD),
    ],
)
def test_a_quarantined_completion_keeps_who_reported_it_and_is_never_settled_by_the_engine(
    core_registry: Registry, cause: Cause, settled_by: SettledBy
) -> None:
    ended = {
        Cause.ANSWERED: Completion.answered(Held(), OutcomeClass.SUCCESS),
        Cause.RECLAIMED_SENT: Completion.reclaimed(Held(), True, "worker-2", "worker-5"),
        Cause.LEASE_TOO_SHORT: Completion.not_sent(Held(), Cause.LEASE_TOO_SHORT, "short"),
    }[cause]
    held = held_completion(ended, "boom")
    assert held.cause == Quarantined(settled_by)
    assert held.cause.settled_by is settled_by  # the attempt row keeps who reported it
    case = Case("quarantined")
    facts = facts_of(case, lambda: saga_of(core_registry, case)).dispatch.facts
    with pytest.raises(ValueError, match="quarantine"):
        settle(held, facts, saga_of(core_registry, case), core_registry, 0.5)


def test_no_completion_is_built_field_by_field_outside_core() -> None:
    """Each kind of completion has its named constructor in core (Completion.answered,
    .not_sent, .reclaimed, .resolved, .probed; core.poison's held_completion)."""
    root = Path(__file__).resolve().parents[2]
    raw = re.compile(r"\bCompletion\(")
    found = [
        str(path.relative_to(root))
        for folder in ("effectusd", "tests")
        for path in (root / folder).rglob("*.py")
        if "core" not in path.relative_to(root / folder).parts[:1]
        and raw.search(path.read_text(encoding="utf-8"))
    ]
    assert found == []


ANSWERS = [outcome for outcome in OutcomeClass if outcome is not OutcomeClass.STALE_FENCE]


@pytest.mark.parametrize(
    ("outcome", "sent", "acknowledged", "after"),
    [
        # Whatever the answer but a stale fence: an acknowledgement moves durable grants only.
        *(
            (outcome, sent, acknowledged, after)
            for outcome in ANSWERS
            for sent, acknowledged, after in [
                (FencingStatus.NOT_REQUESTED, True, FencingStatus.NOT_REQUESTED),
                (FencingStatus.NOT_REQUESTED, False, FencingStatus.NOT_REQUESTED),
                (FencingStatus.PROPAGATED, True, FencingStatus.ACKNOWLEDGED),
                (FencingStatus.PROPAGATED, False, FencingStatus.PROPAGATED),
                (FencingStatus.LOCAL_LOCK_ONLY, True, FencingStatus.LOCAL_LOCK_ONLY),
                (FencingStatus.LOCAL_LOCK_ONLY, False, FencingStatus.LOCAL_LOCK_ONLY),
            ]
        ),
        # A stale fence rejected the grants sent, acknowledged or not; none sent, none rejected.
        *(
            (OutcomeClass.STALE_FENCE, sent, acknowledged, after)
            for acknowledged in (True, False)
            for sent, after in [
                (FencingStatus.NOT_REQUESTED, FencingStatus.NOT_REQUESTED),
                (FencingStatus.PROPAGATED, FencingStatus.STALE_REJECTED),
                (FencingStatus.LOCAL_LOCK_ONLY, FencingStatus.STALE_REJECTED),
            ]
        ),
    ],
)
def test_an_answered_completion_is_the_held_attempts_with_the_fencing_status_the_answer_left(
    outcome: OutcomeClass, sent: FencingStatus, acknowledged: bool, after: FencingStatus
) -> None:
    evidence = {"sent": "maybe_sent", "status_code": 200}
    completion = Completion.answered(
        Held(),
        outcome,
        status_code=200,
        result={"id": 1},
        error="HTTP 200",
        evidence=evidence,
        fencing_acknowledged=acknowledged,
        fencing_sent=sent,
    )
    assert (completion.dispatch_id, completion.attempt, completion.lease_token) == (7, 2, TOKEN)
    assert (completion.outcome, completion.fencing_status) == (outcome, after)
    assert (completion.status_code, completion.result, completion.error) == (
        200,
        {"id": 1},
        "HTTP 200",
    )
    assert completion.evidence is evidence
    assert (completion.cause.settled_by, completion.cause) == (SettledBy.EXECUTOR, Cause.ANSWERED)

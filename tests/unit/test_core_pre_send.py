"""The pre-send guards and the reclaim rule, decided in core: each cause a claimed attempt can
end with before (or without) its call, and what the engine then matches on."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest

from effectusd.core.contracts import VerbContract
from effectusd.core.pre_send import BUDGET_SPENT, CONTRACT_DRIFT, LEASE_TOO_SHORT, pre_send
from effectusd.core.settlement import AttemptFacts, as_locked
from effectusd.core.states import Cause, OutcomeClass, SettledBy
from effectusd.core.transition import Completion, FenceWait


@dataclass(frozen=True)
class Call:
    contract_hash: str
    budget_spent: bool = False
    dispatch_id: int = 9
    attempt: int = 3
    lease_token: str = "lease-9"


CHARGE = VerbContract(name="charge", destination="payments", path="/charges")


def test_a_call_pinned_by_the_live_contract_within_budget_and_lease_goes_on() -> None:
    assert pre_send(Call(CHARGE.contract_hash), CHARGE, lease_covers_call=True) is None


@pytest.mark.parametrize(
    ("call", "contract", "lease", "cause", "error"),
    [
        (Call("0" * 64), CHARGE, True, Cause.CONTRACT_DRIFT, CONTRACT_DRIFT),
        (Call(CHARGE.contract_hash), None, True, Cause.CONTRACT_DRIFT, CONTRACT_DRIFT),
        (
            Call(CHARGE.contract_hash, budget_spent=True),
            CHARGE,
            True,
            Cause.BUDGET_SPENT,
            BUDGET_SPENT,
        ),
        (Call(CHARGE.contract_hash), CHARGE, False, Cause.LEASE_TOO_SHORT, LEASE_TOO_SHORT),
        # drift is named first: a drifted verb blocks whatever else is wrong
        (Call("0" * 64, budget_spent=True), CHARGE, False, Cause.CONTRACT_DRIFT, CONTRACT_DRIFT),
    ],
)
def test_a_guard_that_stops_the_call_settles_the_held_attempt_unsent_with_its_cause(
    call: Call, contract: VerbContract | None, lease: bool, cause: Cause, error: str
) -> None:
    stopped = pre_send(call, contract, lease)
    assert stopped is not None
    assert (stopped.dispatch_id, stopped.attempt, stopped.lease_token) == (9, 3, "lease-9")
    assert (stopped.cause, stopped.error) == (cause, error)
    assert (stopped.outcome, stopped.cause.settled_by) == (OutcomeClass.RETRYABLE, SettledBy.GUARD)


def test_a_fence_wait_is_the_cause_it_settles_with_and_says_how_long_and_who_holds() -> None:
    wait = FenceWait(timedelta(seconds=3), "dispatch 4")
    busy = Completion.not_sent(Call(CHARGE.contract_hash), wait, "busy")
    assert (busy.cause, busy.cause.settled_by, busy.written) == (wait, SettledBy.GUARD, False)


@pytest.mark.parametrize(
    "cause", [Cause.ANSWERED, Cause.RECLAIMED_SENT, Cause.RESOLVED, Cause.PROBED]
)
def test_only_a_guards_cause_settles_an_attempt_as_not_sent(cause: Cause) -> None:
    with pytest.raises(ValueError, match="not a pre-send guard's cause"):
        Completion.not_sent(Call(CHARGE.contract_hash), cause, "stopped")


def test_every_cause_says_who_reported_the_attempt() -> None:
    guards = {Cause.CONTRACT_DRIFT, Cause.BUDGET_SPENT, Cause.LEASE_TOO_SHORT}
    guards.add(Cause.WRITE_AHEAD_FAILED)
    expected = {
        **dict.fromkeys(guards, SettledBy.GUARD),
        Cause.ANSWERED: SettledBy.EXECUTOR,
        Cause.RECLAIMED_SENT: SettledBy.RECLAIM,
        Cause.RECLAIMED_UNSENT: SettledBy.RECLAIM,
        Cause.RESOLVED: SettledBy.OPERATOR,
        Cause.PROBED: SettledBy.OPERATOR,
    }
    assert {cause: cause.settled_by for cause in Cause} == expected


@pytest.mark.parametrize(
    ("sent", "outcome", "cause", "says"),
    [
        (False, OutcomeClass.RETRYABLE, Cause.RECLAIMED_UNSENT, "before anything was sent"),
        (True, OutcomeClass.UNKNOWN, Cause.RECLAIMED_SENT, "after the call may have been sent"),
    ],
)
def test_a_reclaim_reads_a_written_ahead_attempt_as_maybe_sent_and_any_other_as_not_sent(
    sent: bool, outcome: OutcomeClass, cause: Cause, says: str
) -> None:
    completion = Completion.reclaimed(Call("h"), sent, "worker-2", "worker-5")
    assert (completion.outcome, completion.cause) == (outcome, cause)
    assert completion.cause.settled_by is SettledBy.RECLAIM and completion.actor == "worker-5"
    assert completion.error == f"lease of worker-2 expired {says}"


def test_a_reclaim_read_unsent_that_locked_a_written_ahead_attempt_settles_it_maybe_sent() -> None:
    read = Completion.reclaimed(Call("h"), False, "worker-2", "worker-5")
    locked = as_locked(read, AttemptFacts(settled_by=None, later_sent=False, sent=True))
    assert (locked.outcome, locked.cause) == (OutcomeClass.UNKNOWN, Cause.RECLAIMED_SENT)
    unchanged = as_locked(read, AttemptFacts(settled_by=None, later_sent=False, sent=False))
    assert unchanged is read

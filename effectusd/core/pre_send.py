"""An attempt's guard before its call (docs/design.md section 7): whether a claimed attempt
is sent at all, and whether a new dispatch may be claimed before a slot is free for it.

``pre_send``: a claimed attempt may go on to its write-ahead and call, or the guard returns
the completion to record: nothing was sent, so the attempt is known not committed, with the
cause the engine matches on (``Completion.not_sent``). The pipeline only carries the answer
out. ``may_wait_for_slot``: the claim policy of a next step the record enqueues. (What an
answer does once it is in: ``effectusd.core.settlement``.)
"""

from __future__ import annotations

from typing import Protocol

from effectusd.core.contracts import VerbContract, pinned
from effectusd.core.states import Cause, Delivery
from effectusd.core.transition import Completion, HeldAttempt

CONTRACT_DRIFT = "contract drift: nothing was sent"
BUDGET_SPENT = "retry budget spent; not sent"
LEASE_TOO_SHORT = "lease too short to finish the call; not sent"


class PendingCall(HeldAttempt, Protocol):
    """A claimed attempt as the guards see it (a store's ``Claim``)."""

    @property
    def contract_hash(self) -> str: ...

    @property
    def budget_spent(self) -> bool: ...


def pre_send(
    call: PendingCall, contract: VerbContract | None, lease_covers_call: bool
) -> Completion | None:
    """None when ``call`` may go on to its write-ahead and call; else the completion that
    settles it unsent. ``contract``: the verb as loaded now (None: no longer configured);
    ``lease_covers_call``: the call's timeout fits in what is left of the lease, judged on the
    daemon's monotonic clock (the caller's, since core reads no clock)."""
    if not pinned(contract, call.contract_hash):
        return Completion.not_sent(call, Cause.CONTRACT_DRIFT, CONTRACT_DRIFT)
    if call.budget_spent:  # the budget was lowered in config below the attempts already made
        return Completion.not_sent(call, Cause.BUDGET_SPENT, BUDGET_SPENT)
    if not lease_covers_call:
        return Completion.not_sent(call, Cause.LEASE_TOO_SHORT, LEASE_TOO_SHORT)
    return None


def may_wait_for_slot(delivery: Delivery, fenced: bool) -> bool:
    """Whether a next step may be born claimed and written ahead while its destination has no
    free slot, to wait in the daemon for the next one (docs/design.md section 7, step 5). Only
    where writing it ahead before its call costs no guard: an unfenced ``at_least_once`` step,
    which a daemon that dies before calling it leaves as "may have been sent" and its verb
    retries under the same key. An ``at_most_once`` step so left would block its saga, and a
    fenced one takes its tokens in a write-ahead of its own, right before its call."""
    return delivery is Delivery.AT_LEAST_ONCE and not fenced

"""What an operator may do to a saga in each state, and the words used when it may not.

Pure: the store reads the saga and its dispatches under lock, asks here, then applies the
engine's transition (resolve, cancel) or the fresh-budget reset (retry) in the same
transaction. Every refusal names the state that caused it, so the operator who lost a race
learns what the winner left behind.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Collection, Sequence
from enum import StrEnum

from effectusd.core.canonical import JsonValue, json_problems, parse_json, unprintable_problem
from effectusd.core.engine import DispatchFacts
from effectusd.core.engine import resumed_stop_reason as resumed_stop_reason
from effectusd.core.errors import EffectusError
from effectusd.core.states import Direction, DispatchState, SagaState


class Action(StrEnum):
    RESOLVE = "resolve"
    RETRY = "retry"
    CANCEL = "cancel"
    PRUNE = "prune"
    ADOPT_CONTRACT = "adopt_contract"


class RefusalKind(StrEnum):
    CONFLICT = "conflict"  # the state does not allow the action (exit 4)
    NOT_FOUND = "not_found"  # no such saga, effect or dispatch (exit 5)
    INVALID = "invalid"  # the input itself is wrong (exit 3)


class Refused(EffectusError):
    """An operator action that was not applied; nothing was written."""

    def __init__(self, kind: RefusalKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class Resolution(StrEnum):
    COMMITTED = "committed"  # the destination has the effect: settle as success
    RETRY = "not_committed_retry"  # known not committed: send again, same key, new attempt
    FAIL = "not_committed_fail"  # known not committed: a permanent failure


class CancelEffect(StrEnum):
    CANCEL_NOW = "cancel_now"  # the forward dispatch was not sent: cancel it, compensate now
    FLAG_ONLY = "flag_only"  # it may be at the destination: the engine acts on its outcome


RETRYABLE_SAGA_STATES = frozenset(
    {
        SagaState.BLOCKED_FENCE,
        SagaState.BLOCKED_CONTRACT,
        SagaState.BLOCKED_COMPENSATION,
        SagaState.BLOCKED_DESTINATION,
    }
)
TERMINAL_SAGA_STATES = frozenset({SagaState.COMPLETED, SagaState.COMPENSATED, SagaState.FAILED})
NOT_SENT_STATES = frozenset({DispatchState.QUEUED, DispatchState.RETRY_WAIT})
# A forward dispatch in these states, with no uncertain attempt, has committed nothing at its
# destination: cancel cancels it now. blocked_destination: the destination answered so.
CANCELABLE_NOW_STATES = NOT_SENT_STATES | {DispatchState.BLOCKED_DESTINATION}


def allowed_actions(state: SagaState) -> frozenset[Action]:
    """Which operator actions a saga in ``state`` admits (before looking at its dispatches)."""
    if state is SagaState.BLOCKED_UNKNOWN:
        return frozenset({Action.RESOLVE})
    if state is SagaState.BLOCKED_COMPENSATION:
        # resolve: its failed compensation was undone by hand (resolve_target)
        return frozenset({Action.RETRY, Action.RESOLVE})
    if state is SagaState.BLOCKED_DESTINATION:
        # retry once the credential or route is fixed; cancel: a forward dispatch refused so
        # committed nothing (cancel_effect refuses it when a compensation is what blocks)
        return frozenset({Action.RETRY, Action.CANCEL})
    if state in RETRYABLE_SAGA_STATES:
        return frozenset({Action.RETRY})
    if state is SagaState.RUNNING:
        return frozenset({Action.CANCEL})
    if state in TERMINAL_SAGA_STATES:
        return frozenset({Action.PRUNE})
    return frozenset()  # compensating: compensation is already under way


def contract_actions(
    blocked_verb: str | None, drifted: Collection[str], unconfigured: Collection[str]
) -> tuple[Action, ...]:
    """What unblocks a blocked_contract saga now, the one that fits first, and nothing the
    action would refuse: adopt-contract when a loaded contract differs from what the saga
    pinned (the change was meant; retry is refused while it stands), retry when the pinned
    contracts are loaded again. ``blocked_verb``: the verb of its blocked_contract dispatch,
    None when it blocked before building one; ``drifted``: its configured verbs whose loaded
    contract is not the pinned one; ``unconfigured``: its verbs the config does not have
    (neither action applies until they are restored)."""
    actions = []
    if drifted and (blocked_verb is None or blocked_verb in drifted):
        actions.append(Action.ADOPT_CONTRACT)
    if blocked_verb is None:
        sendable = not drifted and not unconfigured
    else:
        sendable = blocked_verb not in drifted and blocked_verb not in unconfigured
    if sendable:
        actions.append(Action.RETRY)
    return tuple(actions)


def offered_actions(
    state: SagaState, contract: Sequence[Action] = (), blocking: Collection[Direction] = ()
) -> tuple[Action, ...]:
    """The actions on the whole saga to offer an operator, the one that fits first: retry
    or cancel where the state admits them (``blocking``: the directions of the dispatches
    that block it; a blocked_destination compensation is not canceled, ``cancel_offered``),
    and for blocked_contract ``contract`` (``contract_actions``, which reads the loaded
    config). Resolve is offered per dispatch (``resolutions``); prune is not an action on
    one saga."""
    if state is SagaState.BLOCKED_CONTRACT:
        return tuple(contract)
    allowed = allowed_actions(state)
    if state is SagaState.BLOCKED_DESTINATION and Direction.FORWARD not in blocking:
        allowed = allowed - {Action.CANCEL}
    return tuple(a for a in (Action.RETRY, Action.CANCEL) if a in allowed)


def resolutions(
    state: SagaState, dispatch_state: DispatchState, direction: Direction
) -> tuple[Resolution, ...]:
    """The resolutions ``resolve`` accepts for a dispatch of a saga in ``state`` (none: it
    does not settle that dispatch): every one for the dispatch whose outcome is unknown; for
    the compensation whose permanent failure blocked the saga, undone by hand (committed) or
    sent again, since declaring it failed again would change nothing. The Resolve form
    offers these and no other."""
    if Action.RESOLVE not in allowed_actions(state):
        return ()
    if state is SagaState.BLOCKED_COMPENSATION:
        settled = (
            direction is Direction.COMPENSATION and dispatch_state is DispatchState.FAILED_PERMANENT
        )
    else:
        settled = dispatch_state is DispatchState.BLOCKED_UNKNOWN
    return _admitted(dispatch_state) if settled else ()


def _admitted(target: DispatchState) -> tuple[Resolution, ...]:
    """The resolutions a dispatch ``resolve`` settles admits, by its state."""
    if target is DispatchState.FAILED_PERMANENT:
        return (Resolution.COMMITTED, Resolution.RETRY)
    return tuple(Resolution)


def cancel_offered(
    state: SagaState, cancel_requested: bool, blocking: Collection[Direction]
) -> bool:
    """Whether ``cancel`` is offered (the CLI's next actions, the console's forms) for a saga in
    ``state``; ``blocking``: the directions of the dispatches that block it."""
    if state is SagaState.BLOCKED_DESTINATION:
        return Direction.FORWARD in blocking
    return state is SagaState.RUNNING and not cancel_requested


def _what_next(state: SagaState) -> str:
    if state is SagaState.BLOCKED_UNKNOWN:
        return "use `effectusd resolve`"
    if state in RETRYABLE_SAGA_STATES:
        return "use `effectusd retry`"
    if state is SagaState.RUNNING:
        return "it is running; `effectusd cancel` is the only action"
    if state is SagaState.COMPENSATING:
        return "compensation is already under way"
    return "it is finished"


def saga_refusal(saga_id: str, state: SagaState, action: Action) -> Refused | None:
    """The refusal for ``action`` on a saga in ``state``, or None when the state allows it."""
    if action in allowed_actions(state):
        return None
    if action is Action.CANCEL:
        if state in TERMINAL_SAGA_STATES:
            why = "nothing to cancel"
        elif state.is_blocked:
            why = "a blocked saga is not canceled; resolve or retry it first"
        else:
            why = "compensation is already under way"
        return Refused(RefusalKind.CONFLICT, f"saga {saga_id} is {state.value}: {why}")
    needs = (
        SagaState.BLOCKED_UNKNOWN.value
        if action is Action.RESOLVE
        else " / ".join(sorted(s.value for s in RETRYABLE_SAGA_STATES))
    )
    return Refused(
        RefusalKind.CONFLICT,
        f"saga {saga_id} is {state.value}, not {needs}: {action.value} does not apply "
        f"({_what_next(state)})",
    )


def resolution(
    committed: bool, not_committed: bool, retry: bool, fail: bool, has_result: bool
) -> Resolution:
    """The one resolution the flags describe; Refused(INVALID) for any other combination."""
    if committed == not_committed:
        raise Refused(RefusalKind.INVALID, "give exactly one of --committed or --not-committed")
    if committed:
        if retry or fail:
            raise Refused(RefusalKind.INVALID, "--retry and --fail go with --not-committed")
        return Resolution.COMMITTED
    if has_result:
        raise Refused(RefusalKind.INVALID, "--result goes with --committed")
    if retry == fail:
        raise Refused(RefusalKind.INVALID, "--not-committed needs exactly one of --retry or --fail")
    return Resolution.RETRY if retry else Resolution.FAIL


def required_evidence(evidence: str | None) -> str:
    text = (evidence or "").strip()
    if not text:
        raise Refused(
            RefusalKind.INVALID, "--evidence must say what you checked (it goes on the timeline)"
        )
    return text


def optional_evidence(evidence: str | None) -> str | None:
    text = (evidence or "").strip()
    return text or None


def operator_text(actor: str, evidence: str | None) -> None:
    """Refused (INVALID, naming the field) when the actor or the evidence holds a character
    that would not show as itself on the timeline, in the log or on a terminal: a newline in
    evidence would print as a line of its own, one that can pass for another action; and
    when the actor holds one that shows as nothing (``name_problem``)."""
    for name, problem in (
        ("actor", name_problem(actor)),
        ("evidence", None if evidence is None else unprintable_problem(evidence)),
    ):
        if problem is not None:
            raise Refused(RefusalKind.INVALID, f"{name} {problem}")


def name_problem(name: str) -> str | None:
    """Why ``name`` may not name who acted: ``unprintable_problem``'s reasons, or a format
    character (Unicode category Cf: a zero-width space or joiner, a word joiner, a byte-order
    mark, a soft hyphen), which shows as nothing, so that two names that look alike could
    be two names."""
    problem = unprintable_problem(name)
    if problem is not None:
        return problem
    for position, char in enumerate(name, 1):
        if unicodedata.category(char) == "Cf":
            return (
                f"holds U+{ord(char):04X}, a character that shows as nothing (character "
                f"{position}): give a name of visible characters"
            )
    return None


def resolve_target(
    saga_id: str,
    state: SagaState,
    effect_id: str,
    direction: Direction | None,
    dispatches: Sequence[DispatchFacts],
    known_effects: Sequence[str],
) -> DispatchFacts:
    """The dispatch ``resolve`` settles, or the refusal that says why not: the blocked_unknown
    one, or in a blocked_compensation saga (with ``direction`` compensation) the compensation
    that failed permanently.

    Without ``direction`` the effect's dispatch in blocked_unknown is meant (a saga has at most
    one); when none is blocked, the refusal names the newest one's state.
    """
    if effect_id not in known_effects:
        raise Refused(
            RefusalKind.NOT_FOUND,
            f"saga {saga_id} has no effect {effect_id!r} (effects: {', '.join(known_effects)})",
        )
    mine = [d for d in dispatches if d.effect_id == effect_id]
    if direction is not None:
        mine = [d for d in mine if d.direction is direction]
    if not mine:
        where = f"{effect_id}/{direction.value}" if direction else effect_id
        raise Refused(RefusalKind.NOT_FOUND, f"saga {saga_id} has no dispatch for {where}")
    if state is SagaState.BLOCKED_COMPENSATION:
        return _failed_compensation(saga_id, effect_id, direction, mine, dispatches)
    blocked = [d for d in mine if d.state is DispatchState.BLOCKED_UNKNOWN]
    target = blocked[0] if blocked else max(mine, key=lambda d: d.dispatch_id)
    refusal = saga_refusal(saga_id, state, Action.RESOLVE)
    if refusal is not None:
        raise Refused(
            refusal.kind,
            f"{refusal.message}; {target.effect_id}/{target.direction.value} is "
            f"{target.state.value}",
        )
    if target.state is not DispatchState.BLOCKED_UNKNOWN:
        raise Refused(
            RefusalKind.CONFLICT,
            f"{target.effect_id}/{target.direction.value} of saga {saga_id} is "
            f"{target.state.value}, not blocked_unknown: resolve only settles the dispatch "
            "whose outcome is unknown",
        )
    return target


def _failed_compensation(
    saga_id: str,
    effect_id: str,
    direction: Direction | None,
    mine: Sequence[DispatchFacts],
    dispatches: Sequence[DispatchFacts],
) -> DispatchFacts:
    """The compensation whose permanent failure blocked the saga, if ``effect_id`` names it."""
    failed = [
        d
        for d in dispatches
        if d.direction is Direction.COMPENSATION and d.state is DispatchState.FAILED_PERMANENT
    ]
    blocking = max(failed, key=lambda d: d.dispatch_id) if failed else None
    if blocking is None:
        raise Refused(
            RefusalKind.CONFLICT,
            f"saga {saga_id} is blocked_compensation but none of its compensations failed: "
            "the compensation could not be dispatched; fix its cause and use `effectusd retry`",
        )
    if direction is not Direction.COMPENSATION:
        raise Refused(
            RefusalKind.CONFLICT,
            f"saga {saga_id} is blocked_compensation: the compensation of "
            f"{blocking.effect_id!r} failed permanently; to settle it give --direction "
            "compensation (--committed if it was undone by hand), or use `effectusd retry`",
        )
    if blocking.effect_id != effect_id:
        newest = max(mine, key=lambda d: d.dispatch_id)
        raise Refused(
            RefusalKind.CONFLICT,
            f"{effect_id}/compensation of saga {saga_id} is {newest.state.value}, not "
            f"failed_permanent: the compensation that blocked the saga is "
            f"{blocking.effect_id!r}'s",
        )
    return blocking


def resolution_refusal(saga_id: str, target: DispatchFacts, decision: Resolution) -> Refused | None:
    """A compensation that failed permanently is settled as undone by hand or sent again;
    declaring it failed again would change nothing."""
    if decision not in _admitted(target.state):
        return Refused(
            RefusalKind.CONFLICT,
            f"{target.effect_id}/{target.direction.value} of saga {saga_id} already failed "
            "permanently: give --committed (it was undone by hand) or --not-committed --retry",
        )
    return None


def retry_target(
    saga_id: str, state: SagaState, dispatches: Sequence[DispatchFacts]
) -> DispatchFacts | None:
    """The blocked dispatch ``retry`` sends again; None when the saga blocked before the
    dispatch existed (contract drift or unresolvable arguments at enqueue time), which means
    the dispatch is to be built now."""
    refusal = saga_refusal(saga_id, state, Action.RETRY)
    if refusal is not None:
        raise refusal
    if state is SagaState.BLOCKED_COMPENSATION:
        wanted = [
            d
            for d in dispatches
            if d.direction is Direction.COMPENSATION and d.state is DispatchState.FAILED_PERMANENT
        ]
    else:
        blocked_as = _BLOCKED_AS.get(state, DispatchState.BLOCKED_CONTRACT)
        wanted = [d for d in dispatches if d.state is blocked_as]
    if wanted:
        return max(wanted, key=lambda d: d.dispatch_id)
    if state in _BLOCKED_AS:
        raise Refused(
            RefusalKind.CONFLICT,
            f"saga {saga_id} is {state.value} but none of its dispatches is: "
            "its rows were changed by hand",
        )
    return None


# The dispatch state of what blocks a saga in each state that always has such a dispatch.
_BLOCKED_AS = {
    SagaState.BLOCKED_FENCE: DispatchState.BLOCKED_FENCE,
    SagaState.BLOCKED_DESTINATION: DispatchState.BLOCKED_DESTINATION,
}


def contract_refusal(verb: str, pinned_hash: str, live_hash: str | None) -> Refused | None:
    """A dispatch is only sent again under the contract it was checked with."""
    if live_hash == pinned_hash:
        return None
    why = (
        "is not in the loaded config"
        if live_hash is None
        else f"has contract hash {live_hash[:12]}… in the loaded config, but the saga pinned "
        f"{pinned_hash[:12]}…"
    )
    return Refused(
        RefusalKind.CONFLICT,
        f"verb {verb!r} {why}; restore its configuration (or re-check and re-submit the plan) "
        "before retrying",
    )


def fresh_budget(attempt: int, verb_max_attempts: int) -> int:
    """max_attempts after an operator sends a dispatch again: the attempts already made plus a
    whole new retry budget of the verb, so the next attempt is never the last by accident."""
    if attempt < 0 or verb_max_attempts < 1:
        raise ValueError("attempt must be >= 0 and the verb's max_attempts >= 1")
    return attempt + verb_max_attempts


def resumed_state(direction: Direction) -> SagaState:
    """Where a blocked saga goes when its blocking dispatch is sent again."""
    return SagaState.RUNNING if direction is Direction.FORWARD else SagaState.COMPENSATING


def cancel_effect(
    saga_id: str,
    state: SagaState,
    cancel_requested_by: str | None,
    forward: DispatchFacts | None,
) -> CancelEffect:
    """What ``cancel`` does now, given the saga's live forward dispatch.

    A dispatch that was never sent (queued), or whose every earlier attempt is known not to
    have committed (retry_wait without an uncertain attempt), is canceled now. One that is in
    flight, or whose earlier attempt may have committed, keeps going: only the request is
    recorded, and the engine starts compensation when its outcome is known.
    """
    refusal = saga_refusal(saga_id, state, Action.CANCEL)
    if refusal is not None:
        raise refusal
    can_cancel_now = (
        forward is not None
        and forward.state in CANCELABLE_NOW_STATES
        and forward.uncertain_attempt is None
    )
    if can_cancel_now:
        return CancelEffect.CANCEL_NOW
    if state is SagaState.BLOCKED_DESTINATION:
        raise Refused(
            RefusalKind.CONFLICT,
            f"saga {saga_id} is blocked_destination on a compensation: it is already "
            "compensating; fix the destination's credential or route and use `effectusd retry`",
        )
    if cancel_requested_by is not None:
        live = f"{forward.effect_id} is {forward.state.value}" if forward else "no dispatch is live"
        raise Refused(
            RefusalKind.CONFLICT,
            f"saga {saga_id} is running with a cancel already requested by "
            f"{cancel_requested_by} ({live}); compensation starts when its outcome is recorded",
        )
    return CancelEffect.FLAG_ONLY


def cancel_reason(actor: str, evidence: str | None) -> str:
    return f"canceled by {actor}" + (f": {evidence}" if evidence else "")


def committed_result(text: str | None, direction: Direction | None) -> JsonValue:
    """The ``--result`` of ``resolve --committed``: strict, canonical JSON (default null)."""
    if text is None:
        return None
    if direction is Direction.COMPENSATION:
        raise Refused(
            RefusalKind.INVALID, "--result is for forward steps; compensations store none"
        )
    try:
        value = parse_json(text)
    except ValueError as exc:
        raise Refused(RefusalKind.INVALID, f"--result: {exc}") from None
    problems = json_problems(value, "--result")
    if problems:
        raise Refused(RefusalKind.INVALID, "; ".join(problems))
    return value

"""The decision table of a non-2xx answer (docs/design.md sections 5 and 6): every status by
X-Effectus-Outcome (absent, valid, invalid) by status_map by the destination's ``answers``
preset by delivery by an earlier uncertain attempt by the retry budget, through the classifier
(``executors.classify``) and the engine's settle, asserting the outcome class and the
dispatch's and saga's move. Pure: no socket, no store.

The expected column is written from the rules as the docs state them, independently of the
code: the header, then status_map, then (header absent only) the preset decide the class; a
class the preset gave never settles an earlier uncertain attempt, and a destination_problem
class is retried, then blocked_destination, never compensated.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from itertools import product

import pytest

from effectusd.core.answers import HTTP_ANSWERS, PresetClass
from effectusd.core.durations import format_duration
from effectusd.core.engine import Completion, DispatchFacts, SagaFacts, settle
from effectusd.core.registry import Registry
from effectusd.core.states import (
    Delivery,
    Direction,
    DispatchState,
    FencingStatus,
    OutcomeClass,
    SagaState,
    StepState,
)
from effectusd.executors.classify import Wire, classify
from effectusd.executors.protocol import Invocation
from tests.unit.test_core_engine_settle import VERB_OF, dispatch, saga

SAGA = "b" * 64
# every row of the preset's table, and the codes it leaves unknown (an unlisted one too)
STATUSES = [*sorted(HTTP_ANSWERS), 409, 410, 418, 500, 502, 503]
HEADERS: list[str | None] = [None, "stale_fence", OutcomeClass.RETRYABLE.value, "not-a-class"]
STATUS_MAPS = [False, True]  # True: status_map sends the status to permanent_failure
PRESETS = ["declared", "http"]
DELIVERIES = [Delivery.AT_LEAST_ONCE, Delivery.AT_MOST_ONCE]
UNCERTAIN = [False, True]  # True: attempt 1 may have committed; this is attempt 2
BUDGET_LEFT = [True, False]

R, P, U, S = (
    OutcomeClass.RETRYABLE,
    OutcomeClass.PERMANENT,
    OutcomeClass.UNKNOWN,
    OutcomeClass.STALE_FENCE,
)
D = DispatchState
G = SagaState


class _Answered(Wire):
    @property
    def connection(self) -> str | None:
        return None


def invocation() -> Invocation:
    return Invocation(
        idempotency_key="a" * 64,
        request_id="r-1",
        execution_id="x",
        saga_id=SAGA,
        effect_id="second",
        attempt=1,
        direction=Direction.FORWARD,
        verb="ship",
        argument_hash="c" * 64,
        contract_hash="d" * 64,
        fencing_grants=(),
        deadline=datetime(2030, 1, 1, tzinfo=UTC),
        key_issued_at=None,
        method="POST",
        path="/",
        body=b"{}",
        timeout=1.0,
        dispatch_id=1,
        lease_token="t",
        fencing_sent=FencingStatus.NOT_REQUESTED,
    )


async def classified(
    status: int, header: str | None, mapped: bool, preset: str, body: bytes = b""
) -> Completion:
    headers = {} if header is None else {"X-Effectus-Outcome": header}
    wire = _Answered(invocation())
    wire.answered(status, headers)

    async def read_body(limit: int) -> bytes:
        return body

    return await classify(
        wire,
        0.0,
        headers,
        read_body,
        status_map={status: P} if mapped else {},
        max_response_bytes=1024,
        answers=preset,  # type: ignore[arg-type]
        destination="shop",
    )


def settled(
    registry: Registry,
    completion: Completion,
    delivery: Delivery,
    uncertain: bool,
    budget_left: bool,
) -> tuple[DispatchState, SagaState | None, str | None]:
    verb = VERB_OF[delivery]
    budget = registry.verbs[verb].retry.max_attempts
    attempt = (2 if uncertain else 1) if budget_left else budget
    # the live verb's budget counts (budget_base 0), the row's max_attempts is its own
    # the two budgets spent together: the attempts (unknown outcomes) and the time (the rest)
    elapsed = timedelta(0) if budget_left else registry.verbs[verb].retry.give_up_after
    facts = replace(
        dispatch(delivery, attempt, 1 if uncertain else None), verb=verb, budget_elapsed=elapsed
    )
    transition = settle(
        replace(completion, attempt=attempt), facts, saga(registry, verb), registry, 0
    )
    moved = transition.saga
    return (
        transition.dispatch_state,
        None if moved is None else moved.state,
        transition.last_error if moved is None else moved.stop_reason,
    )


# -- the rules, as the docs state them --------------------------------------------------------


def expected_class(
    status: int, header: str | None, mapped: bool, preset: str
) -> tuple[OutcomeClass, PresetClass | None]:
    if header in {S.value, R.value}:
        return OutcomeClass(header), None
    if mapped:
        return P, None
    if header is None and preset == "http" and status in HTTP_ANSWERS:
        found = HTTP_ANSWERS[status]
        return (P if found is PresetClass.REFUSED else R), found
    return U, None


def expected_move(
    outcome: OutcomeClass,
    found: PresetClass | None,
    delivery: Delivery,
    uncertain: bool,
    budget_left: bool,
) -> tuple[DispatchState, SagaState | None]:
    at_least_once = delivery is Delivery.AT_LEAST_ONCE
    if outcome is S:
        return D.BLOCKED_FENCE, G.BLOCKED_FENCE
    if outcome is U:
        return (
            (D.RETRY_WAIT, None)
            if at_least_once and budget_left
            else (
                D.BLOCKED_UNKNOWN,
                G.BLOCKED_UNKNOWN,
            )
        )
    if outcome is P:
        trusted = at_least_once and found is None  # a kit-like destination replays by key
        if uncertain and not trusted:
            return D.BLOCKED_UNKNOWN, G.BLOCKED_UNKNOWN
        return D.FAILED_PERMANENT, G.COMPENSATING
    if budget_left:  # retryable, by a declaration or by the preset: nothing settled
        return D.RETRY_WAIT, None
    if uncertain:
        return D.BLOCKED_UNKNOWN, G.BLOCKED_UNKNOWN
    if found is PresetClass.DESTINATION:
        return D.BLOCKED_DESTINATION, G.BLOCKED_DESTINATION
    return D.FAILED_PERMANENT, G.COMPENSATING


@pytest.mark.parametrize("status", STATUSES)
async def test_every_combination_classifies_and_settles_as_the_rules_say(
    core_registry: Registry, status: int
) -> None:
    wrong: list[str] = []
    for header, mapped, preset in product(HEADERS, STATUS_MAPS, PRESETS):
        completion = await classified(status, header, mapped, preset)
        outcome, found = expected_class(status, header, mapped, preset)
        if (completion.outcome, completion.preset) != (outcome, found):
            wrong.append(f"{header=} {mapped=} {preset=}: {completion.outcome} {completion.preset}")
            continue
        for delivery, uncertain, budget_left in product(DELIVERIES, UNCERTAIN, BUDGET_LEFT):
            state, saga_state, _ = settled(
                core_registry, completion, delivery, uncertain, budget_left
            )
            want = expected_move(outcome, found, delivery, uncertain, budget_left)
            if (state, saga_state) != want:
                case = f"{header=} {mapped=} {preset=} {delivery} {uncertain=} {budget_left=}"
                wrong.append(f"{case}: {state}, {saga_state}; expected {want}")
    assert wrong == []


# -- what the table's rows say to a person ----------------------------------------------------


async def test_without_the_preset_the_error_names_the_preset_for_a_status_it_would_classify() -> (
    None
):
    completion = await classified(422, None, False, "declared")
    assert completion.outcome is U and completion.preset is None
    assert completion.error == (
        'HTTP 422 without a valid X-Effectus-Outcome: set answers = "http" on destination shop, '
        "or a status_map entry"
    )
    # a status the preset leaves unknown is not sent to the preset
    assert "answers" not in ((await classified(500, None, False, "declared")).error or "")
    unknown = await classified(409, None, False, "http")
    assert unknown.error is not None and 'answers = "http" leaves it unknown' in unknown.error


async def test_an_invalid_outcome_header_is_not_guessed_over_by_the_preset() -> None:
    completion = await classified(401, "stale-fence", False, "http")
    assert completion.outcome is U and completion.preset is None
    assert completion.error == "HTTP 401 with an invalid X-Effectus-Outcome and no status_map entry"


async def test_the_attempts_evidence_says_the_preset_classified_it_and_keeps_the_reason() -> None:
    completion = await classified(401, None, False, "http", b'{"error": "token expired"}')
    assert completion.evidence["answers"] == {"preset": "http", "class": "destination_problem"}
    assert completion.error == (
        "HTTP 401 (its or our configuration's problem; not committed): token expired"
    )


async def test_a_destination_problem_retries_saying_until_when_then_blocks_for_a_person(
    core_registry: Registry,
) -> None:
    completion = await classified(401, None, False, "http", b"token expired")
    state, saga_state, error = settled(
        core_registry, completion, Delivery.AT_MOST_ONCE, False, True
    )
    assert (state, saga_state) == (D.RETRY_WAIT, None)
    budget = format_duration(core_registry.verbs["notify"].retry.give_up_after)
    assert error == (
        "destination answered HTTP 401 (its or our configuration's problem; not "
        f"committed): token expired; retrying for retry.give_up_after ({budget})"
    )
    state, saga_state, reason = settled(
        core_registry, completion, Delivery.AT_MOST_ONCE, False, False
    )
    assert (state, saga_state) == (D.BLOCKED_DESTINATION, G.BLOCKED_DESTINATION)
    assert reason is not None and reason.startswith("second (forward): destination answered")
    assert (
        f"retried for retry.give_up_after ({budget})" in reason
        and "then retry (or cancel)" in reason
    )


def compensation_facts(registry: Registry, attempt: int) -> tuple[DispatchFacts, SagaFacts]:
    facts = saga(registry, "notify")
    steps = dict(facts.steps)
    steps["first"] = replace(steps["first"], state=StepState.COMPENSATING)
    steps["second"] = replace(steps["second"], state=StepState.FAILED)
    undoing = replace(facts, state=SagaState.COMPENSATING, steps=steps)
    budget = registry.verbs["ship"].retry.max_attempts
    spent = attempt >= budget  # and its time with it
    undo = replace(
        dispatch(Delivery.AT_LEAST_ONCE, attempt),
        effect_id="first",
        direction=Direction.COMPENSATION,
        max_attempts=budget,
        budget_elapsed=registry.verbs["ship"].retry.give_up_after if spent else timedelta(0),
    )
    return undo, undoing


@pytest.mark.parametrize(
    ("status", "spent", "expected"),
    [
        (401, False, (D.RETRY_WAIT, None)),
        (403, True, (D.BLOCKED_DESTINATION, G.BLOCKED_DESTINATION)),
        (422, False, (D.FAILED_PERMANENT, G.BLOCKED_COMPENSATION)),
    ],
)
async def test_a_compensation_refused_for_the_destinations_problem_blocks_destination(
    core_registry: Registry,
    status: int,
    spent: bool,
    expected: tuple[DispatchState, SagaState | None],
) -> None:
    budget = core_registry.verbs["ship"].retry.max_attempts
    undo, undoing = compensation_facts(core_registry, budget if spent else 1)
    completion = replace(await classified(status, None, False, "http"), attempt=undo.attempt)
    transition = settle(completion, undo, undoing, core_registry, 0)
    moved = None if transition.saga is None else transition.saga.state
    assert (transition.dispatch_state, moved) == expected

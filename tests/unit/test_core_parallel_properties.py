"""Property tests of the engine for plans with parallel steps (issue 17): random DAGs,
random interleavings of claims and outcomes (late answers included), every Transition
applied by the pure simulator, which checks the invariants at each step:

* no step is compensated before a step that depends on it, nor unless it succeeded;
* compensation goes in the reverse of the order the steps succeeded, and starts only when
  no forward dispatch is live;
* never two dispatches of one step (and direction) at once; a cancel only of a dispatch
  that was not sent;
* nothing is enqueued forward after the saga decided to compensate;
* at rest, every saga is terminal or blocked, and a terminal one left nothing undone;
* after every move, each step's state read from its dispatches (effectusd.core.steps) is the
  state the engine's step moves leave, and a result is stored only with the forward success
  it settles (migration 10016: the store writes no other step move).
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.saga_simulator import Simulator, make_plan

Shape = list[tuple[list[int] | None, str, bool]]


@st.composite
def dags(draw: st.DrawFn, max_steps: int = 7) -> Shape:
    """Steps in a topological order, each after None (the previous step), [] (at once) or
    some earlier steps."""
    count = draw(st.integers(1, max_steps))
    shape: Shape = []
    for index in range(count):
        after = draw(
            st.one_of(
                st.none(),
                st.lists(st.integers(0, index - 1), unique=True, max_size=3)
                if index
                else st.just([]),
            )
        )
        verb = draw(st.sampled_from(["alo", "amo"]))
        shape.append((after, verb, draw(st.booleans())))
    if all(after is None for after, _, _ in shape):
        shape[0] = ([], *shape[0][1:])  # at least one `after`: the parallel engine
    return shape


def sequential(count: int) -> st.SearchStrategy[Shape]:
    step = st.tuples(st.just(None), st.sampled_from(["alo", "amo"]), st.booleans())
    return st.lists(step, min_size=1, max_size=count)


PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(dags(), st.integers(0, 2**32), st.booleans())
def test_random_dags_and_outcomes_keep_every_invariant(
    shape: Shape, seed: int, cancels: bool
) -> None:
    # A seeded generator, not hypothesis' own random: its draws lean to the first choice,
    # which leaves few interleavings tried; the plan's shape still shrinks.
    # The simulator checks every invariant at every move (tests/unit/saga_simulator.py) and
    # fails the example on the first one broken; here, where every saga must come to rest.
    saga = Simulator(make_plan(shape), random.Random(seed), cancels=cancels)
    saga.run()
    assert saga.state.is_terminal or saga.state.is_blocked, saga.state
    assert saga.trace, "no move was made"


@PROPERTY
@given(sequential(6), st.integers(0, 2**32))
def test_a_sequential_plan_runs_as_a_chain_one_step_at_a_time(shape: Shape, seed: int) -> None:
    """One builder for every plan (effectusd.core.next_step): a sequential plan is the chain
    its graph reads it as. It makes the same moves as the same plan written with `after`
    naming the previous step, goes forward in plan order, and compensates in the reverse of
    plan order, each step once."""
    chain: Shape = [
        ([index - 1] if index else [], verb, inv) for index, (_, verb, inv) in enumerate(shape)
    ]
    old = Simulator(make_plan(shape), random.Random(seed))
    new = Simulator(make_plan(chain), random.Random(seed))
    assert old.plan.is_sequential and not new.plan.is_sequential
    old.run()
    new.run()
    assert new.trace == old.trace
    assert (new.state, new.steps) == (old.state, old.steps)
    enqueued = [(effect, way) for kind, effect, way in old.trace if kind == "enqueued"]
    forward = [effect for effect, way in enqueued if way == "forward"]
    assert forward == [f"s{index}" for index in range(1, len(forward) + 1)]  # s0: the submit
    back = [int(effect[1:]) for effect, way in enqueued if way == "compensation"]
    assert back == sorted(set(back), reverse=True)
    assert enqueued == [(e, w) for e, w in enqueued if w == "forward"] + [
        (e, w) for e, w in enqueued if w == "compensation"
    ], "a forward step enqueued after a compensation"

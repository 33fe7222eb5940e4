"""A step's state, read from its dispatches (docs/design.md section 10).

A step's life is its two dispatches': the forward one and, once it is undone, its
compensation. The engine's step moves are therefore not written on a step row where the
dispatch rows a transition writes anyway say the same: the readers derive the state here. A
step row keeps a state only where no dispatch can say it (the Transition's ``StepUpdate``):
a step that failed at enqueue, its arguments unresolvable, has no dispatch at
all; a step never started is pending (a submit writes no step rows: the steps are the saga's
pinned plan's).
"""

from __future__ import annotations

from effectusd.core.states import DispatchState, StepState


def step_state(
    forward: DispatchState | None,
    compensation: DispatchState | None,
    kept: StepState = StepState.PENDING,
) -> StepState:
    """The state of a step whose forward dispatch is in ``forward`` and compensation dispatch
    in ``compensation`` (None: there is none); ``kept`` is the step row's own, read only when
    the step has no dispatch."""
    if compensation is DispatchState.SUCCEEDED:
        return StepState.COMPENSATED
    if compensation is not None:
        # compensating from its enqueue until it succeeds (a failed or blocked compensation
        # blocks the saga with its step still compensating)
        return StepState.COMPENSATING
    if forward is None:
        return kept
    if forward is DispatchState.SUCCEEDED:
        return StepState.SUCCEEDED
    if forward is DispatchState.FAILED_PERMANENT:
        return StepState.FAILED
    if forward is DispatchState.CANCELED:
        return StepState.PENDING  # a forward dispatch canceled unsent: the step never ran
    return StepState.IN_PROGRESS  # queued, in flight, waiting to retry, blocked


# What a reader looks up per step, once per settlement of each step of a saga: every pair of
# (forward, compensation) dispatch states where the step has a dispatch, to the step state
# ``step_state`` gives it. A pair not in it has no dispatch: the step row's kept state.
STEP_STATE_OF: dict[tuple[DispatchState | None, DispatchState | None], StepState] = {
    (forward, compensation): step_state(forward, compensation)
    for forward in (None, *DispatchState)
    for compensation in (None, *DispatchState)
    if forward is not None or compensation is not None
}

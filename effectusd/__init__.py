"""effectusd: a transactional-outbox saga dispatcher.

``Daemon`` (effectusd.dispatcher.daemon) is imported on first use: the client library does
not need the dispatcher's HTTP stack.
"""

from typing import TYPE_CHECKING, Any

from effectusd.client import AsyncClient, Client, Submission, SubmitResult
from effectusd.config import ConfigError
from effectusd.core.checker import CheckIssue, PlanCheckError, check
from effectusd.core.database_url import DatabaseURLError
from effectusd.core.errors import (
    AmbiguousSaga,
    EffectusError,
    PlanError,
    SagaNotFound,
    SchemaNotReady,
    WaitTimeout,
    WaitUnreachable,
    WrongConnection,
)
from effectusd.core.plan import CheckedPlan, PlanSpec
from effectusd.core.plan_builder import (
    Plan,
    compensate,
    fact,
    literal,
    no_compensation,
    result,
    step,
)
from effectusd.core.states import (
    Direction,
    DispatchState,
    OutcomeClass,
    SagaState,
    StepState,
)
from effectusd.core.submission import SagaPruned, SubmitConflict, SubmitError
from effectusd.core.views import (
    AttemptView,
    DispatchView,
    SagaSummary,
    SagaView,
    StepView,
    TimelineEvent,
)

__all__ = [
    "AmbiguousSaga",
    "AsyncClient",
    "AttemptView",
    "CheckIssue",
    "CheckedPlan",
    "Client",
    "ConfigError",
    "Daemon",
    "DatabaseURLError",
    "Direction",
    "DispatchState",
    "DispatchView",
    "EffectusError",
    "OutcomeClass",
    "Plan",
    "PlanCheckError",
    "PlanError",
    "PlanSpec",
    "SagaNotFound",
    "SagaPruned",
    "SagaState",
    "SagaSummary",
    "SagaView",
    "SchemaNotReady",
    "StepState",
    "StepView",
    "Submission",
    "SubmitConflict",
    "SubmitError",
    "SubmitResult",
    "TimelineEvent",
    "WaitTimeout",
    "WaitUnreachable",
    "WrongConnection",
    "check",
    "compensate",
    "fact",
    "literal",
    "no_compensation",
    "result",
    "step",
]
__version__ = "0.1.0"

if TYPE_CHECKING:
    from effectusd.dispatcher.daemon import Daemon


def __getattr__(name: str) -> Any:
    if name == "Daemon":
        from effectusd.dispatcher.daemon import Daemon

        return Daemon
    raise AttributeError(f"module 'effectusd' has no attribute {name!r}")

"""effectusd: a transactional-outbox saga dispatcher."""

from effectusd.client import AsyncClient, Client, Submission, SubmitResult
from effectusd.core.checker import CheckIssue, PlanCheckError, check
from effectusd.core.database_url import DatabaseURLError
from effectusd.core.errors import (
    EffectusError,
    SagaNotFound,
    SchemaNotReady,
    WaitTimeout,
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
from effectusd.core.submission import SagaPruned, SubmitConflict, SubmitError

__all__ = [
    "AsyncClient",
    "CheckIssue",
    "CheckedPlan",
    "Client",
    "DatabaseURLError",
    "EffectusError",
    "Plan",
    "PlanCheckError",
    "PlanSpec",
    "SagaNotFound",
    "SagaPruned",
    "SchemaNotReady",
    "Submission",
    "SubmitConflict",
    "SubmitError",
    "SubmitResult",
    "WaitTimeout",
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
